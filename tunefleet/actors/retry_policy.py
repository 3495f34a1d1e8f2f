"""What a failed attempt means for its job: retry (and where not to), or fail now.

Pure functions over plain values, like matching.py. The budgets themselves are guards
in the job lifecycle table (fsm/job.py: ``retries_left``, ``infra_retries_left``):
this module adds what a table cannot see, the job's history across workers.

- A job error with the same signature on two different workers is the job's fault:
  it fails at once, "failed the same way on w_a and w_b: <signature>", and never
  burns its other retries.
- A retry avoids every worker where this job already failed (a job error or an
  infrastructure failure) while another worker fits it; the scheduler drops the
  avoidance when none does, so a job never waits for a worker that cannot come.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tunefleet.fsm.failure_kinds import FailureKind, says_how

# The kinds that say something about the worker the attempt ran on.
_WORKER_FAULTS = frozenset({FailureKind.JOB_ERROR, FailureKind.INFRASTRUCTURE})


@dataclass(frozen=True, slots=True)
class PastFailure:
    """One ended attempt of a job: where it ran, its kind and signature."""

    worker_id: str | None
    kind: FailureKind | None
    signature: str | None = None


def poison_verdict(history: Sequence[PastFailure], failure: PastFailure) -> str | None:
    """The job's error when ``failure`` repeats an earlier job error's signature on a
    different worker; None when the job may still be retried (always, when the signature
    says only that the trainer exited: then it spends its retries as before)."""
    if (
        failure.kind != FailureKind.JOB_ERROR
        or failure.worker_id is None
        or not says_how(failure.signature)
    ):
        return None
    for past in history:
        if (
            past.kind == FailureKind.JOB_ERROR
            and past.signature == failure.signature
            and past.worker_id is not None
            and past.worker_id != failure.worker_id
        ):
            return (
                f"failed the same way on {past.worker_id} and {failure.worker_id}: "
                f"{failure.signature}"
            )
    return None


def avoided_workers(
    history: Iterable[PastFailure], unacknowledged_by: str | None = None
) -> frozenset[str]:
    """The workers where this job failed, and the one that did not acknowledge its last
    dispatch: its retries go elsewhere while others fit."""
    failed = {
        past.worker_id
        for past in history
        if past.worker_id is not None and past.kind in _WORKER_FAULTS
    }
    return frozenset(failed | {unacknowledged_by} if unacknowledged_by else failed)


def shunned_workers(history: Iterable[PastFailure]) -> frozenset[str]:
    """The workers where this job failed for infrastructure reasons: kept off even when
    every fitting worker is one it failed on, while one it only had a job error on fits
    (that one can still run it; a broken machine cannot)."""
    return frozenset(
        past.worker_id
        for past in history
        if past.worker_id is not None and past.kind == FailureKind.INFRASTRUCTURE
    )


def exclusion(
    avoid: frozenset[str], shun: frozenset[str], fits_outside: Callable[[frozenset[str]], bool]
) -> frozenset[str]:
    """The workers a retry must not go to now: every one it avoids while another fits
    (``fits_outside(set)``: a non-quarantined worker outside ``set`` fits it), else the
    ones it shuns while another fits, else none (it never waits for what cannot come)."""
    if avoid and fits_outside(avoid):
        return avoid
    if shun and fits_outside(shun):
        return shun
    return frozenset()


def avoid_phrase(avoided: Iterable[str]) -> str:
    """For the wait reason: "avoiding w_1, w_2 (it failed there)"."""
    ids = sorted(avoided)
    if not ids:
        return ""
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return f"avoiding {shown} (it failed there)"
