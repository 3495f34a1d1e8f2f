"""Why an attempt ended: its kind, and for a job's own error a one-line signature.

Pure functions over plain values (no I/O): the job actor calls them with what the
worker reported, and the retry and quarantine policies decide from the result.

- ``job_error``: the trainer exited non-zero on its own. Its signature is the
  exception line of the log tail (``ValueError: expected N channels``) or the error's
  last words, with numbers, addresses and paths stripped, so the same bug on two
  machines reads the same.
- ``infrastructure``: not the job's fault. The worker was lost; the kernel's OOM killer
  killed the trainer (a SIGKILL nobody asked for, with the agent's cgroup evidence when
  it could read it); CUDA, NCCL or Xid errors in the log; a GPU gone; the disk full.
- ``worker_shutdown``: the worker's agent stopped the job because it was shutting down
  (SIGTERM from an operator, a spot or preemptible instance reclaimed). Not the job's
  fault and not a broken machine: it spends the job's infrastructure budget, as a lost
  worker does, but never counts towards quarantining the worker.
- ``timeout``, ``cancelled``, ``preempted``, ``undelivered``: the orchestrator's own
  endings, named after the attempt's outcome.

A CUDA *out of memory* error is the job's (its batch is too large for the GPU it asked
for), not the machine's: it is a ``job_error`` with its own signature.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final


class FailureKind(StrEnum):
    JOB_ERROR = "job_error"
    INFRASTRUCTURE = "infrastructure"
    WORKER_SHUTDOWN = "worker_shutdown"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    UNDELIVERED = "undelivered"


# The kinds that spend a job's infrastructure budget (--infra-retries), not a retry.
INFRA_BUDGET_KINDS: Final = frozenset({FailureKind.INFRASTRUCTURE, FailureKind.WORKER_SHUTDOWN})

# An attempt's outcome (storage's job_attempt.outcome) to its kind, where the outcome
# alone decides it. "failed" needs the report (classify_failure); "completed" has none.
KIND_OF_OUTCOME: Final[Mapping[str, FailureKind]] = {
    "lost": FailureKind.INFRASTRUCTURE,
    "undelivered": FailureKind.UNDELIVERED,
    "cancelled": FailureKind.CANCELLED,
    "preempted": FailureKind.PREEMPTED,
}

MAX_SIGNATURE_CHARS: Final = 200
# Lines of the log tail read; the agent sends at most this many.
MAX_TAIL_LINES: Final = 40


@dataclass(frozen=True, slots=True)
class Evidence:
    """What only the agent can see about a failed attempt: the report's ``failure``
    field (tunefleet's agent; SimpleTuner's sends none, and orchestrators before this
    one ignore it). ``signal``: the signal name that ended the trainer, if one did;
    ``oom``: the agent's look at the cgroup or kernel messages ("oom_kill 0 -> 1 in
    /sys/fs/cgroup/.../memory.events"), None when it saw no OOM kill or could not read."""

    exit_code: int | None = None
    signal: str | None = None
    oom: str | None = None
    log_tail: tuple[str, ...] = ()

    @classmethod
    def from_report(cls, failure: Mapping[str, Any] | None) -> Evidence:
        """From the report's ``failure`` object (already bounded by the request schema)."""
        if not failure:
            return cls()
        tail = failure.get("log_tail") or ()
        return cls(
            exit_code=failure.get("exit_code"),
            signal=failure.get("signal"),
            oom=failure.get("oom"),
            log_tail=tuple(str(line) for line in tail)[-MAX_TAIL_LINES:],
        )


@dataclass(frozen=True, slots=True)
class Classified:
    kind: FailureKind
    # job_error: what the trainer failed with, numbers and paths stripped (compared
    # across workers). infrastructure: what gave the machine away ("Xid 79 on GPU 1",
    # "CUDA error", "OOM-killed"), shown in quarantine reasons. Else None.
    signature: str | None
    # False when no retry can help: the worker refused the job, or its command could not
    # start (the job's setup, not a run): it fails at once.
    retry: bool = True


# --- infrastructure patterns: checked on the error and every line of the tail ----------

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=...", "Xid 79", "Xid: 79".
_XID = re.compile(r"\bXid\b\s*(?:\([^)]*\))?\s*:?\s*(\d+)", re.IGNORECASE)
_GPU_INDEX = re.compile(r"\bGPU[ #:]?(\d+)\b", re.IGNORECASE)
_INFRA_PATTERNS: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"fallen off the bus|GPU is lost|GPU has been lost", re.I), "GPU fell off the bus"),
    (
        re.compile(
            r"no CUDA-capable device|No CUDA GPUs are available|cudaErrorNoDevice|"
            r"CUDA driver initialization failed",
            re.I,
        ),
        "GPU gone",
    ),
    (re.compile(r"uncorrectable ECC|ECC error", re.I), "ECC error"),
    (
        re.compile(
            r"\bNCCL\b.*\b(error|timeout|timed out|abort)|nccl(System|Internal|Unhandled\w*)Error|"
            r"Watchdog caught collective operation timeout",
            re.I,
        ),
        "NCCL error",
    ),
    (re.compile(r"No space left on device|ENOSPC|Disk quota exceeded", re.I), "disk full"),
    (re.compile(r"CUDA error|cudaError\w*|CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+", re.I), "CUDA error"),
)
# The agent's words for a job it did not run: a retry would meet the same refusal.
_NOT_RUN = ("refused by this worker", "cannot start command")
# A CUDA allocation failure is the job's (see the module's docstring).
_CUDA_OOM = re.compile(r"out of memory", re.I)

# --- a job error's signature ----------------------------------------------------------

# The last line of a Python traceback: "module.SomethingError: message".
_EXCEPTION_LINE = re.compile(
    r"^\s*((?:[A-Za-z_][\w]*\.)*[A-Z][\w]*(?:Error|Exception|Exit|Interrupt|Failure))(?::\s*(.*))?$"
)
_WHAT_ENDED = re.compile(r"^(?:exit code -?\d+|killed by signal \w+)(?::\s*)?")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:~|\.{1,2})?(?:/[\w.+@%-]+)+/?")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_UUIDISH = re.compile(r"\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b")
_NUMBER = re.compile(r"(?<![A-Za-z_0-9])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")
# A signature that says only that the trainer's process ended with some code, as
# SimpleTuner's agent reports every failure ("Training exited with code N"), or an agent
# with no log tail to read ("exit code N"): any two failures read the same.
_ONLY_AN_EXIT = re.compile(
    r"^(?:the )?(?:\w+ )?(?:exited|exit|failed|terminated)(?: with)?"
    r"(?: (?:exit )?(?:code|status))?(?: N)?\.?$",
    re.IGNORECASE,
)


def kind_of_outcome(outcome: str) -> FailureKind | None:
    """The kind an attempt's outcome decides alone; None for completed and failed."""
    return KIND_OF_OUTCOME.get(outcome)


def classify_failure(error: str | None, evidence: Evidence | None = None) -> Classified:
    """A ``failed`` report's kind and signature, from its error line and the agent's
    evidence (either may be missing: SimpleTuner's agent sends only the error)."""
    evidence = evidence or Evidence()
    lines = [*evidence.log_tail, *([error] if error else [])]
    if evidence.oom:
        return Classified(FailureKind.INFRASTRUCTURE, "OOM-killed")
    found = infrastructure_sign(lines)
    if found is not None:
        return Classified(FailureKind.INFRASTRUCTURE, found)
    if evidence.signal == "SIGKILL" or (error or "").startswith("killed by signal SIGKILL"):
        # Nobody asked for this stop (a cancel's outcome is cancelled): the kernel's OOM
        # killer, where the agent could not read the evidence, or someone on the machine.
        return Classified(FailureKind.INFRASTRUCTURE, "killed by SIGKILL (OOM killer?)")
    if error and error.startswith("worker agent error"):
        return Classified(FailureKind.INFRASTRUCTURE, "worker agent error")
    signature = job_signature(error, evidence.log_tail)
    if error and error.startswith(_NOT_RUN):
        return Classified(FailureKind.JOB_ERROR, signature, retry=False)
    return Classified(FailureKind.JOB_ERROR, signature)


def infrastructure_sign(lines: Iterable[str]) -> str | None:
    """The first machine fault these lines show, newest line first; None if none."""
    for line in reversed(list(lines)):
        xid = _XID.search(line)
        if xid is not None:
            gpu = _GPU_INDEX.search(line)
            return f"Xid {xid.group(1)}" + (f" on GPU {gpu.group(1)}" if gpu else "")
        if _CUDA_OOM.search(line):
            continue
        for pattern, sign in _INFRA_PATTERNS:
            if pattern.search(line):
                return sign
    return None


def job_signature(error: str | None, log_tail: Sequence[str] = ()) -> str:
    """The one line that says how the job failed: the last exception line of the log
    tail, else the error's own words; numbers, addresses and paths stripped."""
    for line in reversed(log_tail):
        match = _EXCEPTION_LINE.match(line)
        if match is not None:
            name, message = match.group(1), match.group(2)
            return normalize(f"{name}: {message}" if message else name)
    text = _WHAT_ENDED.sub("", error or "").strip()
    match = _EXCEPTION_LINE.match(text)
    if match is not None and match.group(2):
        text = f"{match.group(1)}: {match.group(2)}"
    return normalize(text or (error or "the trainer failed"))


def says_how(signature: str | None) -> bool:
    """Whether a job error's signature says how the job failed (an exception, a
    message, a signal), not only that its process exited: only such signatures tell that
    two failures on two workers are the same bug (poison)."""
    return bool(signature) and _ONLY_AN_EXIT.match(signature or "") is None


def normalize(text: str) -> str:
    """``text`` without what differs from one machine or run to the next."""
    text = _UUIDISH.sub("<id>", text)
    text = _PATH.sub("<path>", text)
    text = _HEX.sub("N", text)
    text = _NUMBER.sub("N", text)
    text = _SPACE.sub(" ", text).strip()
    return text[:MAX_SIGNATURE_CHARS]
