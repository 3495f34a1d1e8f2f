"""A stop the orchestrator asks of a job's attempt: a user's cancel, or the run timeout
(a preemption is the other kind of stop: preemption.py). The steps around the job
lifecycle's ``cancel`` and ``fail``, kept out of job_actor.py.

The job stays dispatched or running while its worker stops the trainer: the worker is
sent ``job_cancel`` and given the server's cancel grace to confirm. Its final report,
the loss of the worker, or the grace running out ends the attempt as the stop said
(``cancelled``, or ``failed`` with kind ``timeout``), whatever else happened meanwhile:
the job never goes back to the queue. The stop is stored in the job's timeline, so it
still stands after a restart (the agent may confirm it later).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunefleet.actors import messages as m
from tunefleet.audit import AuditKind
from tunefleet.errors import Conflict
from tunefleet.fsm.failure_kinds import Classified, FailureKind
from tunefleet.fsm.job import TERMINAL_JOB_STATES, JobState
from tunefleet.protocol.events import DEFAULT_CANCEL_REASON

if TYPE_CHECKING:
    from tunefleet.actors.job_actor import JobActor

_TIMEOUT = Classified(FailureKind.TIMEOUT, None)
_CANCELLED = Classified(FailureKind.CANCELLED, None)
_STOPPING = (JobState.DISPATCHED, JobState.RUNNING)


async def cancel(job: JobActor, reason: str, actor: str) -> dict[str, Any]:
    """A pending job ends cancelled now; a dispatched or running one once its worker
    stopped it. 409 if it has already ended."""
    if job.state in TERMINAL_JOB_STATES:
        raise Conflict(f"job {job.job_id} is already {job.state}; nothing to cancel")
    await job.ctx.audit.record(AuditKind.JOB_CANCELLED, actor=actor, target=job.job_id)
    if job.state in (JobState.PENDING, JobState.PENDING_APPROVAL):
        job.ctx.scheduler.tell(m.JobGone(job.job_id))
        await job._end("cancel", JobState.CANCELLED, reason, job.ctx.clock.time())
        await job._stop_self()
        return {"success": True, "job_id": job.job_id, "status": job.state}
    if job.stop_reason is None:
        job.stop_reason = reason
        await _ask_worker_to_stop(job)
    return {"success": True, "job_id": job.job_id, "status": "cancelling"}


async def on_run_timeout_expired(job: JobActor, attempt: int) -> None:
    if job.state != JobState.RUNNING or attempt != job.attempts:
        return
    if job.stop_reason is not None or job.preempt_reason is not None:
        return  # already being stopped (cancelled): that stop decides the outcome
    job.stop_reason = f"exceeded its timeout of {job.rec.timeout_minutes:g} minutes"
    job.stop_is_timeout = True
    await _ask_worker_to_stop(job)


async def _ask_worker_to_stop(job: JobActor) -> None:
    await job.ctx.persistence.record_stop_request(
        job.job_id,
        job.attempts,
        job.worker_id,
        job.stop_reason or DEFAULT_CANCEL_REASON,
        job.stop_is_timeout,
        job.ctx.clock.time(),
    )
    repeat_stop_request(job)
    job._publish()


def repeat_stop_request(job: JobActor) -> None:
    """Push the cancel to the agent and give it the grace period to confirm (again,
    after a restart)."""
    job._tell_worker(m.PushCancel(job.job_id, job.stop_reason or DEFAULT_CANCEL_REASON))
    job._arm(job.ctx.settings.cancel_grace_s, m.CancelGraceExpired(job.attempts))


async def on_cancel_grace_expired(job: JobActor, attempt: int) -> None:
    if attempt != job.attempts or job.state not in _STOPPING:
        return
    # The agent never confirmed; end the job here and free the worker.
    reason = f"{job.stop_reason} (the worker did not confirm the stop)"
    await end_as_asked(job, reason, job.ctx.clock.time())
    job._release_worker(hold=False)
    await job._stop_self()


async def end_as_asked(
    job: JobActor, reason: str | None, now: float, reported: dict[str, Any] | None = None
) -> None:
    """End the attempt as the stop asked: failed (kind ``timeout``) or cancelled."""
    if job.stop_is_timeout:
        await job._end("fail", JobState.FAILED, reason, now, reported, _TIMEOUT)
    else:
        await job._end("cancel", JobState.CANCELLED, reason, now, reported, _CANCELLED)
