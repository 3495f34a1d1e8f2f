"""A job actor's approval decisions: a job held by an approval rule at submit
(``pending_approval``) is never scheduled until a lead of its team or an admin decides.
Approved, it joins the queue with its original seq and submit time, so it waits in the
place it would have had; rejected, it ends ``cancelled`` with the reason as its error.
Who may decide is the HTTP layer's check (http/approval_access.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunefleet.actors import messages as m
from tunefleet.audit import AuditKind
from tunefleet.errors import Conflict
from tunefleet.fsm.job import JOB_LIFECYCLE, JobState

if TYPE_CHECKING:
    from tunefleet.actors.job_actor import JobActor


async def decide_approval(job: JobActor, decision: m.DecideApproval) -> dict[str, Any]:
    if job.state != JobState.PENDING_APPROVAL:
        raise Conflict(f"job {job.job_id} is {job.state}, not awaiting approval; nothing to decide")
    now = job.ctx.clock.time()
    if decision.approve:
        event = job.ctx.audit.entry(AuditKind.JOB_APPROVED, actor=decision.actor, target=job.job_id)
        await job.ctx.persistence.commit_approval(job.job_id, now, event)
        JOB_LIFECYCLE.fire(job, "approve")
        job.rec.wait_reason = None
        job.ctx.scheduler.tell(m.JobWaiting(job.pending_view()))
        job._publish()
        return {"success": True, "job_id": job.job_id, "status": str(job.state)}
    why = f"rejected by {decision.actor}" + (f": {decision.reason}" if decision.reason else "")
    await job.ctx.audit.record(
        AuditKind.JOB_REJECTED, actor=decision.actor, target=job.job_id, reason=decision.reason
    )
    await job._end("reject", JobState.CANCELLED, why, now)
    await job._stop_self()
    return {"success": True, "job_id": job.job_id, "status": str(job.state)}
