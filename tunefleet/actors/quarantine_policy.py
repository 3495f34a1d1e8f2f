"""When a worker is quarantined automatically: a bad machine must not eat the queue.

Pure functions over plain values. A worker is quarantined when its last ``after``
attempt ends that count (within ``within_s``) are all its fault:
- an infrastructure failure on it (lost, OOM-killed, CUDA/NCCL/Xid, a GPU gone, its
  disk full), or
- a job error of a job that then succeeded on another worker.

A completed attempt, or a job error not (yet) shown to be the machine's, ends the run;
the orchestrator's own endings (cancelled, timeout, undelivered, preempted) and the
agent's stop as it shuts down (worker_shutdown) say nothing about the machine and are
skipped. The worker actor keeps the ends (bounded) and asks
again at each one, and when one of its failed jobs succeeds elsewhere.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from tunefleet.fsm.failure_kinds import FailureKind

DEFAULT_QUARANTINE_AFTER = 3
DEFAULT_QUARANTINE_WINDOW_S = 3600.0
# Ends kept per worker: enough for any sensible threshold.
KEPT_ENDS = 32

_SILENT = frozenset(
    {
        FailureKind.CANCELLED,
        FailureKind.TIMEOUT,
        FailureKind.UNDELIVERED,
        FailureKind.PREEMPTED,
        FailureKind.WORKER_SHUTDOWN,  # an operator's SIGTERM, a spot reclaim: not broken
    }
)


@dataclass(frozen=True, slots=True)
class QuarantineRule:
    after: int = DEFAULT_QUARANTINE_AFTER  # 0: never automatically
    within_s: float = DEFAULT_QUARANTINE_WINDOW_S


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """One attempt that ended on the worker. ``kind`` None: it completed."""

    at: float
    job_id: str
    kind: FailureKind | None
    signature: str | None = None


def remember(ends: Sequence[AttemptEnd], end: AttemptEnd) -> tuple[AttemptEnd, ...]:
    """``ends`` with ``end`` added, the oldest dropped past KEPT_ENDS."""
    return (*ends, end)[-KEPT_ENDS:]


def _blamed(end: AttemptEnd, succeeded_elsewhere: Collection[str]) -> bool:
    return end.kind == FailureKind.INFRASTRUCTURE or (
        end.kind == FailureKind.JOB_ERROR and end.job_id in succeeded_elsewhere
    )


def quarantine_reason(
    ends: Sequence[AttemptEnd],
    succeeded_elsewhere: Collection[str],
    now: float,
    rule: QuarantineRule,
) -> str | None:
    """Why the worker must be quarantined now, in one line; None if it need not be."""
    if rule.after <= 0:
        return None
    run: list[AttemptEnd] = []
    for end in reversed(ends):
        if end.at < now - rule.within_s:
            break
        if end.kind in _SILENT:
            continue
        if not _blamed(end, succeeded_elsewhere):
            break
        run.append(end)
    if len(run) < rule.after:
        return None
    run = run[: rule.after]  # newest first
    infra = sum(end.kind == FailureKind.INFRASTRUCTURE for end in run)
    span = _duration(run[0].at - run[-1].at)
    if infra == len(run):
        what = f"{infra} infrastructure failures"
    elif infra == 0:
        what = f"{len(run)} failed jobs that then succeeded elsewhere"
    else:
        elsewhere = len(run) - infra
        what = (
            f"{len(run)} failures ({infra} infrastructure, {elsewhere} of jobs that then "
            "succeeded elsewhere)"
        )
    sign = next((end.signature for end in run if end.kind == FailureKind.INFRASTRUCTURE), None)
    return f"{what} in {span}" + (f" ({sign})" if sign else "")


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(0, round(seconds))} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"
