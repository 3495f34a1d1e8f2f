"""Preemption of a job's attempt: the stop, its bound, and the requeue (issue 25).

Whoever decides (the scheduler reclaiming borrowed GPUs, or an admin through
``POST /api/jobs/{id}/preempt``) calls ``Fleet.preempt``; this module is the mechanism:

1. The job stays dispatched or running while it stops. Its worker is sent a
   ``job_cancel`` with ``preempt: true`` and ``grace_seconds``: tunefleet's agent gives
   the trainer SIGTERM and that long to write a checkpoint, stores the attempt's
   outputs, and reports; SimpleTuner's agent stops its trainer as for any cancel.
2. The worker's final report ends the attempt ``preempted`` (the ``preempt`` transition:
   no retry spent) unless it says ``completed``: a trainer that finished within the grace
   completes the job. The job waits at the head of its priority band, and its next
   attempt resumes from its newest stored checkpoint, like any retry.
3. Without a report within the grace plus the slack, the orchestrator ends the attempt
   ``preempted`` all the same, but the worker takes no new job until it reports on that
   attempt (``reports_owed``) or is lost.

A cancel or run timeout asked for before or during the stop wins: its stop decides the
outcome, as it would have without the preemption.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from tunefleet.actors import messages as m
from tunefleet.audit import AuditKind
from tunefleet.errors import Conflict
from tunefleet.fsm.job import JOB_LIFECYCLE, PREEMPTED, JobState
from tunefleet.protocol.status import TERMINAL_STATUSES, ReportedStatus

if TYPE_CHECKING:
    from tunefleet.actors.context import FleetContext
    from tunefleet.actors.job_actor import JobActor
    from tunefleet.actors.records import JobRecord
    from tunefleet.actors.worker_actor import WorkerActor

# Subtracted from a preempted job's seq while it waits: it comes before every job of its
# priority that was not preempted (seqs are positive), preempted ones in submit order.
HEAD_OF_BAND: Final = 1 << 62
_STOPPING = (JobState.DISPATCHED, JobState.RUNNING)


class NotPreemptible(Conflict):
    """The job is not dispatched or running (or already being stopped): nothing to preempt."""


def queue_seq(rec: JobRecord) -> int:
    """The job's place in its priority band: at the head while its last attempt was
    preempted, else its submission order."""
    return rec.seq - HEAD_OF_BAND if rec.preempted_last else rec.seq


def not_preemptible(job_id: str, state: str) -> NotPreemptible:
    if state in (JobState.PENDING, JobState.PENDING_APPROVAL):
        advice = "it holds no worker; cancel it instead if it should not run"
    else:
        advice = "it has ended"
    return NotPreemptible(
        f"job {job_id} is {state}, not dispatched or running; nothing to preempt ({advice})"
    )


async def request_preemption(job: JobActor, reason: str, actor: str) -> dict[str, Any]:
    """Tell the worker to stop the attempt with the grace, and wait for its word."""
    if job.state not in _STOPPING:
        raise not_preemptible(job.job_id, str(job.state))
    if job.stop_reason is not None:
        raise NotPreemptible(
            f"job {job.job_id} is already being stopped ({job.stop_reason}); "
            "that stop decides how it ends, so there is nothing to preempt"
        )
    if job.preempt_reason is not None:
        raise NotPreemptible(
            f"job {job.job_id} is already being preempted ({job.preempt_reason}); "
            "it goes back to the queue once its worker has stopped it"
        )
    ctx = job.ctx
    await ctx.audit.record(
        AuditKind.JOB_PREEMPTED,
        actor=actor,
        target=job.job_id,
        attempt=job.attempts,
        worker_id=job.worker_id,
        team=job.rec.team_name,
        reason=reason,
    )
    await ctx.persistence.record_stop_request(
        job.job_id, job.attempts, job.worker_id, reason, False, ctx.clock.time(), preempt=True
    )
    job.preempt_reason = reason  # once recorded: a failed write leaves the job as it was
    repeat_preempt_request(job)
    job._publish()
    return {
        "success": True,
        "job_id": job.job_id,
        "status": "preempting",
        "attempt": job.attempts,
        "worker_id": job.worker_id,
        "grace_seconds": ctx.settings.preempt_grace_s,
    }


def repeat_preempt_request(job: JobActor) -> None:
    """Push the preempting cancel to the agent and bound the wait for its report (again,
    after a restart)."""
    settings = job.ctx.settings
    grace = settings.preempt_grace_s
    job._tell_worker(m.PushCancel(job.job_id, job.preempt_reason or PREEMPTED, grace))
    job._arm(grace + settings.preempt_slack_s, m.PreemptGraceExpired(job.attempts))


def preempting(job: JobActor) -> bool:
    """Whether the attempt's end is a preemption's (no cancel or timeout asked since)."""
    return job.preempt_reason is not None and job.stop_reason is None


async def ended_by_report(
    job: JobActor, word: str, now: float, reported: dict[str, Any] | None
) -> bool:
    """The worker's final report on a preempted attempt ends it ``preempted``, unless the
    trainer completed; True when it did here."""
    if not preempting(job) or word == ReportedStatus.COMPLETED:
        return False
    await end_preempted(job, now, reported, confirmed=True)
    return True


async def ended_by_loss(job: JobActor, reason: str, now: float) -> bool:
    """A worker lost (or a dispatch not delivered) while it stopped a preempted attempt:
    preempted all the same, no retry spent; True when that was the case."""
    if not preempting(job):
        return False
    await end_preempted(job, now, confirmed=False, note=reason)
    return True


async def on_preempt_grace_expired(job: JobActor, attempt: int) -> None:
    if attempt != job.attempts or job.state not in _STOPPING or not preempting(job):
        return
    if job.worker_id:
        job.reports_owed[job.worker_id] = attempt
    await end_preempted(job, job.ctx.clock.time(), confirmed=False)


async def end_preempted(
    job: JobActor,
    now: float,
    reported: dict[str, Any] | None = None,
    *,
    confirmed: bool,
    note: str | None = None,
) -> None:
    """The attempt ends ``preempted`` and the job goes back to the queue, at the head of
    its priority band. ``confirmed``: the worker reported the stop, so it is free once
    the answer is written; else it stays held until it reports or is lost."""
    ctx = job.ctx
    attempt, worker_id = job.attempts, job.worker_id
    reason = job.preempt_reason or PREEMPTED
    if not confirmed:
        waited = ctx.settings.preempt_grace_s + ctx.settings.preempt_slack_s
        reason += f" ({note or f'the worker did not report the stop within {waited:g} s'})"
    if reported:
        await ctx.persistence.save_metrics(job.job_id, attempt, reported, now)
    JOB_LIFECYCLE.fire(job, "preempt")
    job._cancel_timers()
    job.preempt_reason = None
    job.rec.preempted_last = True
    if worker_id:
        job.past_workers.add(worker_id)
    job.unacknowledged_by = None
    job.worker_id = None
    job.rec.finished_at = now  # the wait for the next dispatch starts now
    job.rec.progress = None
    event = ctx.audit.entry(
        AuditKind.JOB_REQUEUED,
        actor=worker_id or "orchestrator",
        target=job.job_id,
        reason=reason,
        attempt=attempt,
        attempt_outcome=PREEMPTED,
    )
    await ctx.persistence.commit_preempted(
        job.job_id, attempt, worker_id, reason, now, event, confirmed=confirmed
    )
    ctx.metrics.preemptions.labels(team=job.rec.team_name or "").inc()
    if worker_id and (worker := ctx.workers.get(worker_id)) is not None:
        held = m.JobReleased(
            job.job_id, hold_until_report_written=True, until_final_report=not confirmed
        )
        worker.tell(held)
    ctx.scheduler.tell(m.JobWaiting(job.pending_view()))
    job._publish()


def answer_owed_report(job: JobActor, msg: m.StatusReported) -> dict[str, Any] | None:
    """The answer to a report on an attempt that was preempted without the worker's word
    (None: not such a report): its final one frees the worker."""
    owed = job.reports_owed.get(msg.worker_id)
    if owed is None or msg.worker_id == job.worker_id:
        return None
    if msg.attempt is not None and msg.attempt != owed:
        return None
    if msg.status not in TERMINAL_STATUSES:
        return {"success": True}  # still stopping: the job was requeued meanwhile
    del job.reports_owed[msg.worker_id]
    return {"success": True, "release_hold": True}


def no_report_owed(worker: WorkerActor, current_job_id: str | None) -> bool:
    """A worker held for its report on a preempted attempt whose agent says (heartbeat)
    it no longer holds that job, running or unreported: the report will never come, so
    the hold ends. True when it ended here."""
    held = worker.report_hold
    if held is None or worker.report_hold_timer is not None or current_job_id == held:
        return False
    return worker._end_report_hold(held)


def release_owed_report(ctx: FleetContext, worker_id: str, job_id: str, status: str) -> None:
    """A final report on a preempted attempt of a job that has ended since: the worker,
    held for that report, is free."""
    worker = ctx.workers.get(worker_id)
    if (
        worker is not None
        and status in TERMINAL_STATUSES
        and worker.report_hold == job_id
        and worker.report_hold_timer is None
    ):
        worker.tell(m.ReportWritten(job_id))
