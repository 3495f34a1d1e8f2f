"""Which attempt a worker's log batch is for, and whether that attempt still takes lines.

A log batch is accepted only for a live attempt (dispatched or running) of a job the
worker holds: posts for an attempt that ended (the job finished, was given to another
worker, or dispatched again) are refused with 409 so an agent stops sending them, and
the per-attempt quota (storage/log_quota.py) bounds the rest (issue 23).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tunefleet.errors import Conflict, Forbidden
from tunefleet.fsm.job import JobState

if TYPE_CHECKING:
    from tunefleet.actors.job_actor import JobActor

_LIVE = (JobState.DISPATCHED, JobState.RUNNING)


def live_attempt(job: JobActor, worker_id: str, attempt: int | None) -> int:
    """The attempt the batch is for (the current one when it names none), or the refusal:
    Forbidden for a worker that never had the job, Conflict for an attempt that ended."""
    job_id = job.job_id
    if job.worker_id != worker_id:
        if worker_id not in job.past_workers:
            raise Forbidden("Worker not assigned to this job")
        raise Conflict(
            f"{_which(job_id, attempt)} has ended (the job went back to the queue or to "
            "another worker); stop sending its logs"
        )
    current = job.attempts
    if attempt is not None and attempt != current:
        raise Conflict(
            f"attempt {attempt} of job {job_id} has ended (the job is on attempt {current}); "
            "stop sending its logs"
        )
    if job.state not in _LIVE:
        raise Conflict(
            f"attempt {current} of job {job_id} has ended ({job.state}); stop sending its logs"
        )
    return current


def ended_job_refusal(job_id: str, state: str, attempt: int | None) -> Conflict:
    """For a worker that had the job, once the job itself has ended."""
    return Conflict(
        f"{_which(job_id, attempt)} has ended (the job is {state}); stop sending its logs"
    )


def _which(job_id: str, attempt: int | None) -> str:
    return f"attempt {attempt} of job {job_id}" if attempt is not None else f"job {job_id}"
