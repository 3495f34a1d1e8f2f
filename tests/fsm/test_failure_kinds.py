"""An attempt's end: its kind and signature (tunefleet/fsm/failure_kinds.py)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunefleet.fsm.failure_kinds import (
    MAX_SIGNATURE_CHARS,
    Evidence,
    FailureKind,
    classify_failure,
    job_signature,
    kind_of_outcome,
    normalize,
    says_how,
)

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/home/ml/train.py", line 412, in <module>',
    "    main()",
    "ValueError: expected 4 channels in /data/run-17/latents.pt, got 3",
]


@pytest.mark.parametrize(
    ("error", "tail", "kind", "signature"),
    [
        # The trainer's own exception: a job error, its signature stripped.
        (
            "exit code 1: ValueError: expected 4 channels in /data/run-17/latents.pt, got 3",
            TRACEBACK,
            FailureKind.JOB_ERROR,
            "ValueError: expected N channels in <path>, got N",
        ),
        (
            "exit code 2: KeyError: 'unet'",
            [],
            FailureKind.JOB_ERROR,
            "KeyError: 'unet'",
        ),
        ("exit code 3", [], FailureKind.JOB_ERROR, "exit code N"),
        # CUDA running out of memory is the job's (its batch is too large).
        (
            "exit code 1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            [],
            FailureKind.JOB_ERROR,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate N GiB",
        ),
        # The machine's faults.
        (
            "exit code 1: RuntimeError: CUDA error: an illegal memory access was encountered",
            [],
            FailureKind.INFRASTRUCTURE,
            "CUDA error",
        ),
        (
            "exit code 1: done",
            ["NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus. GPU 1"],
            FailureKind.INFRASTRUCTURE,
            "Xid 79 on GPU 1",
        ),
        (
            "exit code 1: torch.distributed.DistBackendError: NCCL error in: "
            "ProcessGroupNCCL.cpp:1275, unhandled system error",
            [],
            FailureKind.INFRASTRUCTURE,
            "NCCL error",
        ),
        (
            "exit code 1: OSError: [Errno 28] No space left on device",
            [],
            FailureKind.INFRASTRUCTURE,
            "disk full",
        ),
        (
            "exit code 1: RuntimeError: No CUDA GPUs are available",
            [],
            FailureKind.INFRASTRUCTURE,
            "GPU gone",
        ),
        (
            "killed by signal SIGKILL",
            [],
            FailureKind.INFRASTRUCTURE,
            "killed by SIGKILL (OOM killer?)",
        ),
        ("worker agent error: OSError()", [], FailureKind.INFRASTRUCTURE, "worker agent error"),
        # A segfault in the job's own code is its own.
        ("killed by signal SIGSEGV", [], FailureKind.JOB_ERROR, "killed by signal SIGSEGV"),
    ],
)
def test_examples(error: str, tail: list[str], kind: FailureKind, signature: str) -> None:
    classified = classify_failure(error, Evidence(log_tail=tuple(tail)))
    assert (classified.kind, classified.signature) == (kind, signature)


def test_the_agents_oom_evidence_makes_a_kill_the_machines() -> None:
    evidence = Evidence(exit_code=-9, signal="SIGKILL", oom="oom_kill 0 -> 1 in /sys/x")
    assert classify_failure("killed by signal SIGKILL", evidence).signature == "OOM-killed"


def test_a_report_without_evidence_is_judged_by_its_error_alone() -> None:
    # SimpleTuner's agent sends only an error line.
    assert Evidence.from_report(None) == Evidence()
    assert classify_failure(None).kind == FailureKind.JOB_ERROR
    assert classify_failure(None).signature == "the trainer failed"


def test_evidence_from_a_report_keeps_the_tail_bounded() -> None:
    evidence = Evidence.from_report({"signal": "SIGTERM", "log_tail": [str(i) for i in range(99)]})
    assert evidence.signal == "SIGTERM"
    assert evidence.log_tail[-1] == "98" and len(evidence.log_tail) == 40


@pytest.mark.parametrize(
    ("outcome", "kind"),
    [
        ("lost", FailureKind.INFRASTRUCTURE),
        ("undelivered", FailureKind.UNDELIVERED),
        ("cancelled", FailureKind.CANCELLED),
        ("preempted", FailureKind.PREEMPTED),
        ("completed", None),
        ("failed", None),  # the report decides (classify_failure)
    ],
)
def test_outcomes_that_decide_their_kind_alone(outcome: str, kind: FailureKind | None) -> None:
    assert kind_of_outcome(outcome) == kind


# --- properties -------------------------------------------------------------------------

WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ", min_size=1, max_size=30)
NUMBERS = st.integers(min_value=0, max_value=10**9)
PATHS = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8),
    min_size=1,
    max_size=4,
).map(lambda parts: "/" + "/".join(parts))


@given(WORDS, NUMBERS, NUMBERS, PATHS, PATHS)
def test_the_same_error_with_other_numbers_and_paths_has_one_signature(
    message: str, n1: int, n2: int, path1: str, path2: str
) -> None:
    """Two machines, two runs: the numbers and paths differ, the bug does not."""
    one = f"exit code 1: RuntimeError: {message} {n1} at {path1}"
    two = f"exit code 1: RuntimeError: {message} {n2} at {path2}"
    assert job_signature(one) == job_signature(two)
    assert classify_failure(one).signature == classify_failure(two).signature


@given(st.text(max_size=2000), st.lists(st.text(max_size=300), max_size=50))
def test_classification_never_fails_and_signatures_stay_one_short_line(
    error: str, tail: list[str]
) -> None:
    classified = classify_failure(error, Evidence(log_tail=tuple(tail)))
    assert classified.kind in (FailureKind.JOB_ERROR, FailureKind.INFRASTRUCTURE)
    assert classified.signature is not None
    assert len(classified.signature) <= MAX_SIGNATURE_CHARS
    assert "\n" not in classified.signature


@given(st.text(max_size=500))
def test_normalizing_twice_changes_nothing(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once
    # No number is left standing on its own ("conv2d" keeps its digit: it is a name).
    assert re.search(r"(?<![A-Za-z_0-9])[0-9]", once) is None


@given(
    st.sampled_from(
        [
            "CUDA error: misaligned address",
            "Xid 48",
            "NCCL error: timeout",
            "No space left on device",
            "GPU has fallen off the bus",
        ]
    ),
    st.lists(WORDS, max_size=5),
)
def test_a_machine_fault_anywhere_in_the_tail_is_infrastructure(
    fault: str, noise: list[str]
) -> None:
    tail = (*noise, f"[rank0] {fault}", *noise)
    assert (
        classify_failure("exit code 1", Evidence(log_tail=tail)).kind == FailureKind.INFRASTRUCTURE
    )


@pytest.mark.parametrize(
    "error",
    [
        "refused by this worker: command 'sh' is not among the allowed commands",
        "cannot start command 'trainer': No such file or directory",
    ],
)
def test_a_job_that_never_ran_is_not_retried(error: str) -> None:
    classified = classify_failure(error)
    assert (classified.kind, classified.retry) == (FailureKind.JOB_ERROR, False)
    assert classify_failure("exit code 1: KeyError: 'x'").retry is True


@pytest.mark.parametrize(
    ("error", "tells"),
    [
        ("Training exited with code 1", False),  # SimpleTuner's agent, every failure
        ("exit code 3", False),  # tunefleet's agent with nothing in the log tail
        ("Process exited with status 137", False),
        ("the trainer failed", False),
        ("exit code 1: ValueError: expected 4 channels, got 3", True),
        ("killed by signal SIGSEGV", True),
        ("exit code 1: loss is NaN at step 1200", True),
    ],
)
def test_a_signature_says_how_the_job_failed_or_only_that_it_exited(
    error: str, tells: bool
) -> None:
    assert says_how(job_signature(error)) is tells
