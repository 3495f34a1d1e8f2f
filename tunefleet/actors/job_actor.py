"""JobActor: one per non-terminal job. Owns the job lifecycle, attempts and retries,
the assigned worker, progress and the timeline; stops when the job ends."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import structlog

from tunefleet.actors import job_stop, preemption
from tunefleet.actors import messages as m
from tunefleet.actors.approvals import decide_approval
from tunefleet.actors.attempt_ends import classify_report, note_end, out_of_budget_error
from tunefleet.actors.context import FleetContext
from tunefleet.actors.matching import PendingJob
from tunefleet.actors.progress_merge import MergedProgress, ProgressTooLarge, merge_progress
from tunefleet.actors.records import JobRecord
from tunefleet.actors.retry_policy import avoided_workers, shunned_workers
from tunefleet.actors.runtime import Actor
from tunefleet.audit import AuditEntry, AuditKind
from tunefleet.errors import Conflict, Forbidden
from tunefleet.fsm.failure_kinds import INFRA_BUDGET_KINDS, Classified, FailureKind
from tunefleet.fsm.job import JOB_LIFECYCLE, JobFsmMixin, JobState
from tunefleet.protocol.events import JobRequirements, JobSubmitEvent
from tunefleet.protocol.status import RUNNING_STATUSES, TERMINAL_STATUSES, ReportedStatus
from tunefleet.tokens import hash_token, new_upload_token

if TYPE_CHECKING:
    from tunefleet.actors.worker_actor import WorkerActor

log = structlog.get_logger(__name__)

# The agent stopped the job because it is shutting down (fsm/failure_kinds.py).
SHUT_DOWN = Classified(FailureKind.WORKER_SHUTDOWN, None)

# What agents say (training already read as running at the wire) or a heartbeat carried.
_RUNNING_WORDS = RUNNING_STATUSES | {m.HEARTBEAT_PROGRESS}


class JobActor(JobFsmMixin, Actor):
    def __init__(self, ctx: FleetContext, record: JobRecord) -> None:
        Actor.__init__(self, f"job:{record.job_id}")
        self.ctx = ctx
        self.rec = record
        self.job_id = record.job_id
        self.state = record.state
        self.attempts = record.attempts
        self.undelivered = record.undelivered
        self.failures = record.failures  # its ended attempts: kind, signature, worker
        self.infra_failures = record.infra_failures
        self.infra_retries = ctx.settings.infra_retries
        self.preempted = record.preempted
        self.max_retries = record.max_retries
        self.worker_id: str | None = record.worker_id
        self.past_workers: set[str] = set()
        # The worker that let its last dispatch pass the acknowledgement timeout: the next
        # dispatch prefers another (matching.plan), as that one may never acknowledge.
        self.unacknowledged_by: str | None = None
        # Why the orchestrator asked the agent to stop ("cancelled by …" or "timeout").
        self.stop_reason: str | None = record.stop_reason
        self.stop_is_timeout = record.stop_is_timeout
        # A preemption under way, and workers owing a report on a preempted attempt.
        self.preempt_reason, self.reports_owed = record.preempt_reason, dict[str, int]()
        # This attempt's acknowledgement, run and cancel-grace timers: the job's own
        # (each expiry names its attempt, so a late one for an earlier attempt is ignored).
        self.timers: list[Any] = []
        # The current attempt's upload credential (only its hash is stored) and the
        # checkpoint it was told to resume from.
        self.upload_token = ""
        self.resume_checkpoint: str | None = None

    @property
    def config_name(self) -> str | None:
        return self.rec.config_name

    def pending_view(self) -> PendingJob:
        return PendingJob(
            self.job_id,
            self.rec.priority,
            preemption.queue_seq(self.rec),
            self.rec.requirements(),
            avoid=avoided_workers(self.failures, self.unacknowledged_by),
            shun=shunned_workers(self.failures),
            user=self.rec.user_name,
            team=self.rec.team_name,
        )

    async def receive(self, message: object) -> object:
        match message:
            case m.StatusReported():
                return await self.on_status(message)
            case m.CancelJob(reason=reason, actor=actor):
                return await job_stop.cancel(self, reason, actor)
            case m.DecideApproval():
                return await decide_approval(self, message)
            case m.Snapshot():
                return self.snapshot()
            case m.DispatchTo(worker_id=worker_id):
                await self.on_dispatch(worker_id)
            case m.WorkerLost(worker_id=worker_id, reason=reason):
                await self.on_worker_lost(worker_id, reason)
            case m.AckTimeoutExpired(attempt=attempt):
                await self.on_ack_timeout_expired(attempt)
            case m.NotDelivered():
                await self.on_not_delivered(message)
            case m.RunTimeoutExpired(attempt=attempt):
                await job_stop.on_run_timeout_expired(self, attempt)
            case m.CancelGraceExpired(attempt=attempt):
                await job_stop.on_cancel_grace_expired(self, attempt)
            case m.PreemptJob(reason=reason, actor=actor):
                return await preemption.request_preemption(self, reason, actor)
            case m.PreemptGraceExpired(attempt=attempt):
                await preemption.on_preempt_grace_expired(self, attempt)
            case _:
                raise TypeError(f"JobActor cannot handle {type(message).__name__}")
        return None

    def snapshot(self) -> dict[str, Any]:
        return {"state": self.state, "attempts": self.attempts, "worker_id": self.worker_id}

    # --- dispatch ----------------------------------------------------------------------

    async def on_dispatch(self, worker_id: str) -> None:
        if self.state != JobState.PENDING:
            # Offered a worker after it stopped waiting (cancelled meanwhile): the
            # scheduler counts that worker as taken until the worker says otherwise.
            if (worker := self.ctx.workers.get(worker_id)) is not None:
                worker.try_tell(m.CancelReservation(self.job_id))
            return
        worker = self.ctx.workers.get(worker_id)
        if worker is None or not await worker.ask(m.ReserveForJob(self.job_id)):
            self.ctx.scheduler.tell(m.JobWaiting(self.pending_view()))
            return
        artifacts = self.ctx.artifacts
        token = new_upload_token() if artifacts is not None else ""
        try:
            # Only a retry can have checkpoints: the first attempt is the first writer.
            self.resume_checkpoint = (
                await artifacts.resume_checkpoint(self.job_id)
                if artifacts is not None and self.attempts > 0
                else None
            )
        except Exception:
            worker.tell(m.CancelReservation(self.job_id))
            self.ctx.scheduler.tell(m.JobWaiting(self.pending_view()))
            raise
        now = self.ctx.clock.time()
        event = self._begin_dispatch(worker_id, now)
        try:
            await self.ctx.persistence.commit_dispatch(
                self._sync(),
                worker_id,
                self.attempts,
                now,
                event,
                upload_token_hash=hash_token(token) if token else None,
            )
        except Exception:
            # Nothing was recorded: undo in memory and let the scheduler try again.
            self._undo_dispatch(worker)
            self.ctx.scheduler.tell(m.JobWaiting(self.pending_view()))
            raise
        self._push_dispatch(worker, token, now)
        self._publish()

    async def store_placed(self, worker: WorkerActor, submitted: AuditEntry) -> m.PushJob:
        """Before this actor is spawned: store the new job already dispatched to ``worker``
        (reserved for it), in one commit with its submission and both audit events (their
        lines written with it); the push for the caller to send once this actor is known.
        If the commit fails nothing was stored: the worker's reservation is cancelled and
        the error raised."""
        token = new_upload_token() if self.ctx.artifacts is not None else ""
        now = self.ctx.clock.time()
        dispatched = self._begin_dispatch(worker.worker_id, now)
        try:
            seq = await self.ctx.persistence.create_dispatched_job(
                self._sync(),
                submitted,
                dispatched,
                upload_token_hash=hash_token(token) if token else None,
            )
        except Exception:
            self._undo_dispatch(worker)
            raise
        self.rec.seq = seq
        self._dispatched(token, now)
        self.arm_ack_timeout()  # no acknowledgement can come before the push
        self._publish()
        return m.PushJob(self.job_id, self.submit_event())

    def _begin_dispatch(self, worker_id: str, now: float) -> AuditEntry:
        """The dispatch in memory (one more attempt), and its audit event to store with it."""
        JOB_LIFECYCLE.fire(self, "dispatch")
        self.worker_id = worker_id
        self.rec.dispatched_at = now
        self.rec.wait_reason = None
        return self.ctx.audit.entry(
            AuditKind.JOB_DISPATCHED,
            actor="scheduler",
            target=self.job_id,
            worker_id=worker_id,
            attempt=self.attempts,
        )

    def _undo_dispatch(self, worker: WorkerActor) -> None:
        self.state, self.attempts, self.worker_id = JobState.PENDING, self.attempts - 1, None
        worker.tell(m.CancelReservation(self.job_id))

    def _push_dispatch(self, worker: WorkerActor, token: str, now: float) -> None:
        """The dispatch is durable: send the job_submit, and wait for its acknowledgement."""
        self._dispatched(token, now)
        worker.tell(m.PushJob(self.job_id, self.submit_event()))
        self.arm_ack_timeout()

    def _dispatched(self, token: str, now: float) -> None:
        self.upload_token = token
        self.rec.preempted_last = False  # it left the head of its band
        self.ctx.metrics.dispatch_latency.observe(max(0.0, now - self._queued_at()))

    def submit_event(self) -> JobSubmitEvent:
        rec = self.rec
        return JobSubmitEvent(
            job_id=self.job_id,
            config=rec.config,
            dataloader=rec.dataloader,
            # Only with a token: an endpoint without one would only be refused.
            upload_endpoint=self.ctx.settings.upload_endpoint if self.upload_token else "",
            upload_token=self.upload_token,
            resume_checkpoint=self.resume_checkpoint,
            config_name=rec.config_name,
            attempt=self.attempts,
            command=rec.command,
            env=rec.env,
            requirements=JobRequirements(
                target=rec.target,
                gpu_count=rec.gpu_count,
                min_vram_gb=rec.min_vram_gb,
                gpu_name=rec.gpu_name,
                worker_labels=rec.worker_labels,
            ),
        )

    async def renew_upload_credentials(self) -> None:
        """A new upload token for the current attempt (after a restart, when the job_submit
        is pushed again: only hashes were kept), and its resume checkpoint again."""
        artifacts = self.ctx.artifacts
        if artifacts is None:
            return
        token = new_upload_token()
        await artifacts.records.add_token(self.job_id, self.attempts, hash_token(token))
        self.upload_token = token
        if self.attempts > 1:
            self.resume_checkpoint = await artifacts.resume_checkpoint(self.job_id)

    def _queued_at(self) -> float:
        return self.rec.finished_at or self.rec.submitted_at

    # --- reports from the worker -------------------------------------------------------

    async def on_status(self, msg: m.StatusReported) -> dict[str, Any]:
        if (owed := preemption.answer_owed_report(self, msg)) is not None:
            return owed
        if msg.worker_id != self.worker_id:
            if msg.worker_id in self.past_workers:
                raise Conflict(
                    f"job {self.job_id} was reassigned after this worker lost it; abandon it"
                )
            raise Forbidden("Worker not assigned to this job")
        if msg.attempt is not None and msg.attempt != self.attempts:
            # A late report on an earlier dispatch (often to this same worker, after an
            # acknowledgement timeout) must not acknowledge or end the current one.
            raise Conflict(
                f"report for attempt {msg.attempt} of job {self.job_id}, which is now on "
                f"attempt {self.attempts}; abandon attempt {msg.attempt}"
            )
        now = self.ctx.clock.time()
        word = msg.status
        # Before anything changes: a report that would grow the progress past its bounds
        # is refused whole (the job's end excepted, see _merge_progress).
        merged = self._merge_progress(msg.progress, word) if msg.progress else None
        reported = msg.progress if merged is not None else None
        if self.state == JobState.DISPATCHED:
            await self._acknowledge(now)
        if msg.resumed_from is not None and word in _RUNNING_WORDS:
            await self._record_resume(msg.resumed_from, now)
        if merged is not None:
            self.rec.progress = merged.progress
        if word in _RUNNING_WORDS:
            if merged is not None:
                await self.ctx.persistence.save_progress(
                    self.job_id,
                    self.rec.progress,
                    now,
                    attempt=self.attempts,
                    reported=reported,
                )
            if merged is not None and merged.changed:
                # Pages hold the progress already (the job's view, or this feed since):
                # they are sent the change, not the whole object again.
                self.ctx.hub.publish(
                    "job_progress",
                    job_id=self.job_id,
                    attempt=self.attempts,
                    progress=merged.changed,
                )
            return {"success": True}
        if word not in TERMINAL_STATUSES:
            return {"success": True}
        # The last numbers of the run belong to its history too, in the end's own commit.
        await self._finish_from_report(word, msg.error, now, reported, msg.failure)
        if word == ReportedStatus.COMPLETED and self.ctx.artifacts is not None:
            await self.ctx.artifacts.record_outcome(self.job_id, self.attempts, msg.outputs)
        return {"success": True, "release_hold": True}

    def _merge_progress(self, report: dict[str, Any], word: str) -> MergedProgress | None:
        try:
            return merge_progress(self.rec.progress, report, self.ctx.settings.limits)
        except ProgressTooLarge as error:
            if word not in TERMINAL_STATUSES:
                raise
            # The job's end is never lost to its numbers: it ends, without them.
            log.warning(
                "final progress over its bounds; not kept", job_id=self.job_id, reason=str(error)
            )
            return None

    async def _acknowledge(self, now: float) -> None:
        JOB_LIFECYCLE.fire(self, "start")
        self.rec.started_at = now
        self._cancel_timers()
        await self.ctx.persistence.commit_start(self.job_id, self.attempts, self.worker_id, now)
        if self.worker_id and (worker := self.ctx.workers.get(self.worker_id)) is not None:
            worker.tell(m.JobAcknowledged(self.job_id))
        self.arm_run_timeout(elapsed_s=0.0)
        if self.stop_reason is not None and self.worker_id:
            # Cancelled while dispatched: the agent has it now, so tell it again.
            self._tell_worker(m.PushCancel(self.job_id, self.stop_reason))
        elif self.preempt_reason is not None:  # likewise, and its bound again
            preemption.repeat_preempt_request(self)
        self._publish()

    async def _record_resume(self, checkpoint: str, now: float) -> None:
        """On the worker's word, once it has restored the checkpoint (not at the
        acknowledgement: the download may fail and the trainer start fresh)."""
        await self.ctx.persistence.store.append_job_event(
            self.job_id,
            "resumed",
            worker_id=self.worker_id,
            attempt=self.attempts,
            detail={"message": f"resumed from {checkpoint}", "checkpoint": checkpoint},
            at=now,
        )

    async def _finish_from_report(
        self,
        word: str,
        error: str | None,
        now: float,
        reported: dict[str, Any] | None,
        evidence: dict[str, Any] | None = None,
    ) -> None:
        if await preemption.ended_by_report(self, word, now, reported):
            return
        if word == ReportedStatus.COMPLETED:
            await self._end("complete", JobState.COMPLETED, None, now, reported)
        elif word == ReportedStatus.FAILED and self.stop_reason is None:
            # Retried (on another worker) unless poison or out of budget: retry_policy.py.
            failure = error or "the trainer reported a failure"
            ended, final = classify_report(self, failure, evidence)
            if final is not None:
                await self._end("fail", JobState.FAILED, final, now, reported, ended)
            else:
                if reported:
                    await self.ctx.persistence.save_metrics(
                        self.job_id, self.attempts, reported, now
                    )
                self._release_worker(hold=True)
                await self._requeue_or_fail(failure, now, ended=ended)
                return
        elif self.stop_reason is not None:  # a cancel or the run timeout: job_stop.py
            await job_stop.end_as_asked(self, self.stop_reason, now, reported)
        else:
            # The agent stopped the job on its own (it is shutting down): not the job's fault.
            # The worker no longer runs it either, so it is released like any final report.
            if reported:
                await self.ctx.persistence.save_metrics(self.job_id, self.attempts, reported, now)
            reason = f"worker {self.worker_id} stopped the job: {error}"
            self._release_worker(hold=True)
            await self._requeue_or_fail(reason, now, ended=SHUT_DOWN)
            return
        self._release_worker(hold=True)
        await self._stop_self()

    # --- losses, timeouts, cancel --------------------------------------------------------

    async def on_worker_lost(self, worker_id: str, reason: str) -> None:
        if worker_id != self.worker_id or self.state not in (
            JobState.DISPATCHED,
            JobState.RUNNING,
        ):
            return
        await self._requeue_or_fail(reason, self.ctx.clock.time())

    async def on_ack_timeout_expired(self, attempt: int) -> None:
        """No report on this attempt within the acknowledgement timeout: not delivered, so
        no retry spent. SimpleTuner's agent drops a job_submit that races its own
        completion report; the job goes back to the queue. The cancel stops an agent that
        did start it after all."""
        if self.state != JobState.DISPATCHED or attempt != self.attempts:
            return
        worker_id = self.worker_id
        reason = (
            f"worker {worker_id} did not acknowledge the dispatch within "
            f"{self.ctx.settings.dispatch_ack_timeout_s:g} s"
        )
        self._tell_worker(m.PushCancel(self.job_id, "dispatch not acknowledged"))
        self._release_worker(hold=False)
        await self._requeue_or_fail(
            reason, self.ctx.clock.time(), undelivered=True, unacknowledged=True
        )

    async def on_not_delivered(self, msg: m.NotDelivered) -> None:
        """The worker's stream closed before it acknowledged this attempt and did not come
        back within the reconnect grace. Back to the queue now, not at the acknowledgement
        timeout; the attempt is not spent, since the job never started."""
        if (
            self.state != JobState.DISPATCHED
            or msg.worker_id != self.worker_id
            or (msg.attempt is not None and msg.attempt != self.attempts)
        ):
            return
        self._release_worker(hold=False)
        await self._requeue_or_fail(msg.reason, self.ctx.clock.time(), undelivered=True)

    # --- common endings ------------------------------------------------------------------

    async def _requeue_or_fail(
        self,
        reason: str,
        now: float,
        *,
        undelivered: bool = False,
        unacknowledged: bool = False,
        ended: Classified | None = None,
    ) -> None:
        if await preemption.ended_by_loss(self, reason, now):
            return
        if self.stop_reason is not None:
            # A cancel or timeout was asked for: losing the worker (or its acknowledgement)
            # ends the job as that stop would have; it never goes back to the queue.
            await job_stop.end_as_asked(self, self.stop_reason, now)
            await self._stop_self()
            return
        worker_id = self.worker_id
        # Lost, never acknowledged or shut down: the worker's; else what the failed report
        # showed.
        outcome = str(JobState.FAILED) if ended not in (None, SHUT_DOWN) else None
        if ended is None:
            lost = FailureKind.UNDELIVERED if undelivered else FailureKind.INFRASTRUCTURE
            ended = Classified(lost, None)
        if undelivered:
            # Counted before the transition, so its retries_left guard sees it.
            self.undelivered += 1
        elif ended.kind in INFRA_BUDGET_KINDS:
            self.infra_failures += 1  # its own budget, not a retry
        new_state = JOB_LIFECYCLE.fire(self, "lose")
        self._cancel_timers()
        if worker_id:
            self.past_workers.add(worker_id)
        self.unacknowledged_by = worker_id if unacknowledged else None
        self.worker_id = None
        if new_state == JobState.PENDING:
            self.rec.finished_at = now  # the wait for the next dispatch starts now
            self.rec.progress = None
            event = self.ctx.audit.entry(
                AuditKind.JOB_REQUEUED, actor="supervisor", target=self.job_id, reason=reason
            )
            await self.ctx.persistence.commit_requeue(
                self.job_id,
                self.attempts,
                worker_id,
                reason,
                now,
                event,
                undelivered=undelivered,
                kind=str(ended.kind),
                signature=ended.signature,
                outcome=outcome,
            )
            note_end(self, worker_id, ended.kind, ended.signature, now)
            self.ctx.metrics.requeues.labels(reason=_reason_kind(reason)).inc()
            self.ctx.scheduler.tell(m.JobWaiting(self.pending_view()))
            self._publish()
            return
        error = out_of_budget_error(self, reason, ended)
        await self._record_end(JobState.FAILED, error, now, worker_id, None, ended)
        await self._stop_self()

    async def _end(
        self,
        trigger: str,
        dest: JobState,
        reason: str | None,
        now: float,
        reported: dict[str, Any] | None = None,
        ended: Classified | None = None,
    ) -> None:
        JOB_LIFECYCLE.fire(self, trigger)
        self._cancel_timers()
        await self._record_end(dest, reason, now, self.worker_id, reported, ended)

    async def _record_end(
        self,
        dest: JobState,
        reason: str | None,
        now: float,
        worker_id: str | None,
        reported: dict[str, Any] | None = None,
        ended: Classified | None = None,
    ) -> None:
        self.rec.finished_at = now
        self.rec.error = reason if dest != JobState.COMPLETED else None
        event = self.ctx.audit.entry(
            f"job.{dest}", actor=worker_id or "orchestrator", target=self.job_id, reason=reason
        )
        await self.ctx.persistence.commit_end(
            self.job_id,
            dest,
            self.attempts,
            worker_id,
            reason,
            now,
            self.rec.progress,
            event,
            reported=reported,
            kind=str(ended.kind) if ended is not None else None,
            signature=ended.signature if ended is not None else None,
        )
        if self.attempts > 0 and (ended is not None or dest == JobState.COMPLETED):
            kind, signature = (ended.kind, ended.signature) if ended else (None, None)
            note_end(self, worker_id, kind, signature, now)
        self.ctx.metrics.job_finished(str(dest))
        if self.ctx.artifacts is not None:
            self.ctx.artifacts.job_ended(self.job_id)
        log.info("job ended", job_id=self.job_id, state=str(dest), reason=reason)

    def _release_worker(self, *, hold: bool) -> None:
        self._tell_worker(m.JobReleased(self.job_id, hold_until_report_written=hold))

    def _tell_worker(self, message: object) -> None:
        if self.worker_id and (worker := self.ctx.workers.get(self.worker_id)) is not None:
            worker.tell(message)

    async def _stop_self(self) -> None:
        self._cancel_timers()
        self.ctx.jobs.pop(self.job_id, None)
        self._publish()
        self.ctx.system.stop_soon(self)

    # --- timers: arm_<timer> sends <Timer>Expired, handled by on_<timer>_expired --------

    def arm_ack_timeout(self) -> None:
        self._arm(self.ctx.settings.dispatch_ack_timeout_s, m.AckTimeoutExpired(self.attempts))

    def arm_run_timeout(self, elapsed_s: float) -> None:
        if self.rec.timeout_minutes:
            remaining = max(0.0, self.rec.timeout_minutes * 60.0 - elapsed_s)
            self._arm(remaining, m.RunTimeoutExpired(self.attempts))

    def _arm(self, delay_s: float, message: object) -> None:
        self.timers.append(self.ctx.clock.call_later(delay_s, partial(self.try_tell, message)))

    def _cancel_timers(self) -> None:
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()

    def _sync(self) -> JobRecord:
        self.rec.state = self.state
        self.rec.attempts = self.attempts
        self.rec.worker_id = self.worker_id
        return self.rec

    def _publish(self) -> None:
        self._sync()
        self.ctx.hub.publish(
            "job",
            job_id=self.job_id,
            status=str(self.state),
            worker_id=self.worker_id,
            attempt=self.attempts,
            undelivered=self.undelivered,  # attempts that spent no retry: "1 of 4", not "2 of 4"
            preempted=self.preempted,
            infrastructure_failures=self.infra_failures,
            progress=self.rec.progress,
            error=self.rec.error,
        )


def _reason_kind(reason: str) -> str:
    for needle, kind in (
        ("heartbeat", "heartbeat_timeout"),
        ("did not reconnect", "not_delivered"),
        ("acknowledge", "ack_timeout"),
        ("disconnected", "disconnected"),
        ("deleted", "deleted"),
        ("stopped the job", "agent_stopped"),
    ):
        if needle in reason:
            return kind
    return "other"
