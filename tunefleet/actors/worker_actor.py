"""WorkerActor: one per known worker. Owns the worker lifecycle, the SSE outbox and
stream, the heartbeat deadline and the worker's current job."""

from __future__ import annotations

from functools import partial
from typing import Any, cast

import structlog

from tunefleet.actors import messages as m
from tunefleet.actors import worker_quarantine as quarantine
from tunefleet.actors.clock import Timer
from tunefleet.actors.context import FleetContext
from tunefleet.actors.deadline import Deadline
from tunefleet.actors.delete_advice import API_FORCE, refused_delete_advice
from tunefleet.actors.matching import WorkerView
from tunefleet.actors.preemption import no_report_owed
from tunefleet.actors.records import WorkerRecord
from tunefleet.actors.redelivery import submit_to_redeliver
from tunefleet.actors.runtime import LATER, Actor
from tunefleet.actors.stream import Outbox, StreamConnection
from tunefleet.actors.stream_presence import ReconnectGrace
from tunefleet.actors.worker_health import health_moves
from tunefleet.actors.worker_health import on_heartbeat as on_health_heartbeat
from tunefleet.audit import AuditKind
from tunefleet.errors import Conflict
from tunefleet.fsm.job import JobState
from tunefleet.fsm.worker import WORKER_LIFECYCLE, WorkerFsmMixin, WorkerState
from tunefleet.protocol.endpoints import RegisterResponse, ResumeJob
from tunefleet.protocol.events import DrainEvent, JobCancelEvent, ShutdownEvent
from tunefleet.protocol.events import StreamEvent as WorkerEvent
from tunefleet.protocol.fields import WorkerType

log = structlog.get_logger(__name__)

# SSE event ids are reserved in blocks: the worker's row holds the highest id its actor
# may hand out, written before any id above it is used. A restart starts counting from
# the row, so ids only ever go up (an agent's Last-Event-ID then never hides a newer
# event) while pushing an event writes nothing.
EVENT_ID_BLOCK = 1000
# More ids than any one message uses (a drain and a shutdown, a job_submit): kept in
# hand before each message is handled, so no push waits for a write.
EVENT_IDS_PER_MESSAGE = 16


class WorkerActor(WorkerFsmMixin, Actor):
    def __init__(self, ctx: FleetContext, record: WorkerRecord) -> None:
        Actor.__init__(self, f"worker:{record.worker_id}")
        self.ctx = ctx
        self.rec = record
        self.worker_id = record.worker_id
        self.state = record.state
        self.saved_state = record.state
        self.drain_requested = record.drain_requested
        self.current_job_id = record.current_job_id
        self.quarantined = record.quarantine_reason is not None
        # Its recent attempt ends, and jobs that failed here then completed elsewhere:
        # what its automatic quarantine decides from (worker_quarantine.py).
        self.attempt_ends: tuple[quarantine.AttemptEnd, ...] = ()
        self.succeeded_elsewhere: dict[str, None] = {}
        self.outbox = Outbox(record.last_event_id)
        self.event_ids_reserved = record.last_event_id
        self.connection: StreamConnection | None = None
        self.force_replay_job: str | None = None
        # The job whose final report's response is not yet on the wire; no dispatch
        # until it is, because SimpleTuner's agent drops a job_submit that arrives first.
        self.report_hold: str | None = None
        # Ends the hold if the answer's confirmation never comes; cancelled when it does.
        self.report_hold_timer: Timer | None = None
        # An ephemeral worker whose job ended takes no other job unless its agent asks
        # for more (SimpleTuner's asks GET /api/workers/queue; tunefleet's simply exits).
        self.retiring = False
        self.heartbeat = Deadline(ctx.clock, self._heartbeat_expired)
        self.grace = ReconnectGrace(
            ctx.clock,
            ctx.settings.reconnect_grace_s,
            lambda generation: self.try_tell(m.ReconnectGraceExpired(generation)),
        )

    # --- views --------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.connection is not None

    @property
    def schedulable(self) -> bool:
        return (
            self.state == WorkerState.IDLE
            and self.connected
            and self.report_hold is None
            and not self.drain_requested
            and not self.retiring
            and not self.quarantined
        )

    def view(self) -> WorkerView:
        draining = self.drain_requested or self.retiring
        return self.rec.view(connected=self.connected, draining=draining)

    def snapshot(self) -> dict[str, Any]:
        return self.rec.public(
            state=self.state,
            drain_requested=self.drain_requested,
            current_job_id=self.current_job_id,
            connected=self.connected,
            now=self.ctx.clock.time(),
        )

    # --- message handling ------------------------------------------------------------

    def answer_at_once(self, message: object) -> object:
        # A heartbeat, a placed job's reservation and its push need no await (issue 14:
        # the ask's task and loop turns were a tenth of a heartbeat's CPU, and two of a
        # dispatch's turns); the id reservation receive may make first needs one. Nor do
        # a job cycle's three tells, but for an ephemeral worker's release (it may ask
        # the scheduler whether to retire): a task each for the idle worker was a tenth
        # of the actors' CPU per cycle.
        if self.outbox.last_event_id + EVENT_IDS_PER_MESSAGE > self.event_ids_reserved:
            return LATER
        match message:
            case m.HeartbeatReceived() if not health_moves(self, message):
                return self.on_heartbeat(message)
            case m.ReserveForJob(job_id=job_id):
                return self.on_reserve(job_id)
            case m.PushJob():
                self.on_push_job(message)
                return None
            case m.JobAcknowledged(job_id=job_id):
                self.outbox.acknowledge_job(job_id, "job_submit")
                return None
            case m.AttemptEnded(kind=None):  # completed: never a reason to quarantine
                quarantine.remember_end(self, message)
                return None
            case m.JobReleased() if message.hold_until_report_written or not self._may_retire:
                if self._release(message):
                    self._announce()  # what _after_release does for a worker that stays
                return None
            case m.ReportWritten(job_id=job_id) if not self._may_retire:
                if self._end_report_hold(job_id):
                    self._announce()
                return None
        return LATER

    async def receive(self, message: object) -> object:
        if self.outbox.last_event_id + EVENT_IDS_PER_MESSAGE > self.event_ids_reserved:
            await self._reserve_event_ids()
        reply = await self._handle(message)
        if self.outbox.last_event_id > self.event_ids_reserved:
            # Never expected (one message uses a few ids); already sent, so reserve late.
            log.warning("event ids used before reserved", worker_id=self.worker_id)
            await self._reserve_event_ids()
        return reply

    async def _reserve_event_ids(self) -> None:
        # Ids must not start over after a restart: an agent reconnecting with a
        # Last-Event-ID it saw before would be denied the events pushed since.
        ceiling = self.outbox.last_event_id + EVENT_ID_BLOCK
        await self.ctx.persistence.save_worker_event_id(self.worker_id, ceiling)
        self.event_ids_reserved = ceiling

    async def _handle(self, message: object) -> object:
        match message:
            case m.HeartbeatReceived():  # its health level moves: worker_health.py
                return await on_health_heartbeat(self, message)
            case m.Register():
                return await self.on_register(message)
            case m.OpenStream():
                return self.on_open_stream(message)
            case m.ReserveForJob(job_id=job_id):
                return self.on_reserve(job_id)
            case m.Drain():
                return await self.on_drain()
            case m.Resume():
                return await self.on_resume()
            case m.Quarantine(reason=reason, actor=actor):
                return await quarantine.quarantine(self, reason, actor)
            case m.Unquarantine(actor=actor):
                return await quarantine.release(self, actor)
            case m.AttemptEnded():
                await quarantine.attempt_ended(self, message)
            case m.SucceededElsewhere(job_id=job_id):
                await quarantine.succeeded_elsewhere(self, job_id)
            case m.Retire(force=force):
                return await self.on_retire(force)
            case m.Snapshot():
                return self.snapshot()
            case m.CloseStream(connection_id=cid):
                self.on_close_stream(cid)
            case m.ReconnectGraceExpired(generation=generation):
                self.on_reconnect_grace_expired(generation)
            case m.CancelReservation(job_id=job_id):
                await self.on_cancel_reservation(job_id)
            case m.PushJob():
                self.on_push_job(message)
            case m.PushCancel(job_id=job_id, reason=reason, preempt_grace_s=grace):
                preempt = grace is not None
                event = JobCancelEvent(
                    job_id=job_id, reason=reason, preempt=preempt, grace_seconds=grace
                )
                self.push(event, job_id)
            case m.JobAcknowledged(job_id=job_id):
                self.outbox.acknowledge_job(job_id, "job_submit")
            case m.JobReleased():
                await self.on_job_released(message)
            case m.ReportWritten(job_id=job_id):
                await self.on_report_written(job_id)
            case m.HeartbeatExpired():
                await self.on_heartbeat_expired()
            case m.Disconnected():
                await self.lose("agent disconnected", AuditKind.WORKER_DISCONNECTED)
            case m.TokenRotated():
                # Its agent can no longer heartbeat or report: it is gone now, not at the
                # heartbeat deadline, and its job goes back to the queue.
                await self.lose("token rotated", AuditKind.WORKER_OFFLINE)
            case m.StaysForWork():
                self.on_stays_for_work()
            case _:
                raise TypeError(f"WorkerActor cannot handle {type(message).__name__}")
        return None

    async def on_start(self) -> None:
        if self.state not in (WorkerState.OFFLINE,):
            # After a restart, or a new worker that has not connected yet: it has until the
            # deadline to (re)connect, else it is lost and its job requeued.
            grace = (
                self.ctx.settings.never_connected_timeout_s
                if self.state == WorkerState.CONNECTING
                else self.ctx.settings.heartbeat_timeout_s
            )
            self.heartbeat.extend(grace)
            self._announce()  # not connected yet, but wait reasons should know of it
        try:
            # Now, with every other worker's at a restart (they share write groups), not
            # at whatever message comes first; receive() tries again if this fails.
            await self._reserve_event_ids()
        except Exception as error:
            log.warning("event ids not reserved", worker_id=self.worker_id, error=str(error))

    async def on_stop(self) -> None:
        self._cancel_report_hold_timer()
        self.heartbeat.cancel()
        self.grace.cancel()
        self._close_stream()

    # --- registration and stream -------------------------------------------------------

    async def on_register(self, msg: m.Register) -> dict[str, Any]:
        now = self.ctx.clock.time()
        resume_job: ResumeJob | None = None
        abandon_job: str | None = None
        held = self.current_job_id
        reported = msg.current_job_id
        if reported and reported != held:
            abandon_job = reported
        if held is not None:
            job = self.ctx.jobs.get(held)
            if job is not None and reported == held:
                resume_job = ResumeJob(job_id=held, config_name=job.config_name, status=job.state)
            elif job is not None and job.state == JobState.DISPATCHED:
                # The agent never got it (or lost it before starting): send it again.
                self.force_replay_job = held
            else:
                if job is not None:
                    reason = f"worker {self.worker_id} came back without its job"
                    job.tell(m.WorkerLost(self.worker_id, reason))
                self.outbox.acknowledge_job(held)
                self.current_job_id = None
        if self.report_hold is not None:
            # A report owed on a preempted attempt is not awaited any longer: the agent
            # abandons that job (abandon_job) and takes a new one only once it stopped.
            self._end_report_hold(self.report_hold)
        self.rec.apply_registration(msg, now)
        self.outbox.acknowledge_type("shutdown")
        self.retiring = False
        WORKER_LIFECYCLE.fire(self, "register")
        self.heartbeat.extend(self.ctx.settings.heartbeat_timeout_s)
        await self._persist(
            connected_at=now, last_heartbeat_at=now, **self.rec.registration_fields()
        )
        await self.ctx.audit.record(
            AuditKind.WORKER_REGISTER,
            actor=self.worker_id,
            target=self.worker_id,
            client_address=msg.client_address,
            state=self.state,
            resumed_job=resume_job.job_id if resume_job else None,
            abandoned_job=abandon_job,
        )
        self.ctx.metrics.registrations.labels(outcome="success").inc()
        self._announce()
        answer = RegisterResponse(
            worker_id=self.worker_id,
            sse_url=f"/api/workers/stream?worker_id={self.worker_id}",
            resume_job=resume_job,
            abandon_job=abandon_job,
            # tunefleet's additions: what the administrator set is in force; an agent
            # that knows these follows them (SimpleTuner's ignores them).
            name=self.rec.name,
            worker_type=cast(WorkerType, self.rec.worker_type),
            warnings=self.rec.agent_warnings(),
        )
        return answer.model_dump()

    def on_open_stream(self, msg: m.OpenStream) -> StreamConnection:
        self._close_stream()
        conn = StreamConnection()
        self.connection = conn
        self.grace.cancel()  # back within the grace: it keeps its job
        for event in self.outbox.replay(msg.last_event_id, self.force_replay_job):
            conn.send(event)
        self.force_replay_job = None
        if self.drain_requested:
            self.push(DrainEvent())
        quarantine.on_stream_opened(self)
        self.rec.last_seen_at = self.ctx.clock.time()
        self._announce()
        return conn

    def on_close_stream(self, connection_id: int) -> None:
        if self.connection is not None and self.connection.connection_id == connection_id:
            self.connection = None
            if self._undelivered_submit() is not None:
                self.grace.start()
            self._announce()

    def _undelivered_submit(self) -> dict[str, Any] | None:
        """The job_submit of this worker's job, while the agent has not acknowledged it."""
        if self.current_job_id is None:
            return None
        return self.outbox.find(self.current_job_id, "job_submit")

    def on_reconnect_grace_expired(self, generation: int) -> None:
        if not self.grace.expired(generation) or self.connection is not None:
            return
        submit = self._undelivered_submit()
        if submit is None or (job := self.ctx.jobs.get(str(self.current_job_id))) is None:
            return
        grace = self.ctx.settings.reconnect_grace_s
        reason = (
            f"worker {self.worker_id}'s stream closed before it acknowledged the job, "
            f"and it did not reconnect within {grace:g} s"
        )
        # The job releases this worker (JobReleased), which forgets the job_submit: an
        # agent that reconnects later is not sent it again.
        job.tell(m.NotDelivered(self.worker_id, submit.get("attempt"), reason))

    def _close_stream(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def push(self, message: WorkerEvent, job_id: str | None = None) -> None:
        # A drain is re-sent from state on every new stream, so it need not be kept.
        kind = message.type
        data = message.model_dump(exclude={"type"})
        event = self.outbox.add(kind, data, job_id, keep=kind != "drain")
        if self.connection is not None:
            self.connection.send(event)

    # --- heartbeats and loss -----------------------------------------------------------

    def on_heartbeat(self, msg: m.HeartbeatReceived) -> bool:
        if self.state == WorkerState.OFFLINE:
            return False
        now = self.ctx.clock.time()
        self.heartbeat.extend(self.ctx.settings.heartbeat_timeout_s)
        self.rec.apply_heartbeat(msg, now)
        self.ctx.metrics.heartbeats.inc()
        job = self.ctx.jobs.get(self.current_job_id) if self.current_job_id else None
        if job is not None and msg.job_progress and msg.current_job_id == self.current_job_id:
            job.tell(m.StatusReported(self.worker_id, m.HEARTBEAT_PROGRESS, msg.job_progress, None))
        if no_report_owed(self, msg.current_job_id):
            self._announce()  # it no longer holds a preempted job: free for new work
        self._redeliver_if_dropped(msg.current_job_id)
        self.ctx.persistence.heartbeat_seen(self.rec, self.ctx.clock)
        self._show()  # live pages show GPU use and "last seen"
        return True

    def _redeliver_if_dropped(self, reported_job_id: str | None) -> None:
        """The agent says it holds no job (or another) while its dispatch waits to be
        acknowledged: it dropped the job_submit (redelivery.py); the same event again."""
        conn, held = self.connection, self.current_job_id
        submit = submit_to_redeliver(self.outbox, held, conn is not None, reported_job_id)
        if submit is not None and conn is not None:
            conn.send(submit)
            self.ctx.metrics.redeliveries.inc()
            log.info("job_submit sent again", worker_id=self.worker_id, job_id=held)

    def _heartbeat_expired(self) -> None:
        self.try_tell(m.HeartbeatExpired())

    async def on_heartbeat_expired(self) -> None:
        if self.state == WorkerState.OFFLINE or not self.heartbeat.expired():
            return
        if self.state == WorkerState.CONNECTING:
            reason = f"never connected within {self.ctx.settings.never_connected_timeout_s:g} s"
        else:
            reason = f"heartbeat timeout ({self.ctx.settings.heartbeat_timeout_s:g} s)"
        await self.lose(reason, AuditKind.WORKER_OFFLINE)

    async def lose(self, reason: str, kind: str) -> None:
        if self.state == WorkerState.OFFLINE:
            return
        WORKER_LIFECYCLE.fire(self, "lose")
        self.heartbeat.cancel()
        self._close_stream()
        lost_job = self.current_job_id
        self.current_job_id = None
        self.report_hold = None
        self._cancel_report_hold_timer()
        self.force_replay_job = None
        if lost_job is not None:
            self.outbox.acknowledge_job(lost_job)
        self.rec.offline_at = self.ctx.clock.time()
        await self._persist(offline_at=self.rec.offline_at)
        if lost_job is not None and (job := self.ctx.jobs.get(lost_job)) is not None:
            job.tell(m.WorkerLost(self.worker_id, f"worker {self.worker_id} lost: {reason}"))
        # A fact nobody can refuse: held if the database will not take it now.
        await self.ctx.audit.record(
            kind, actor=self.worker_id, target=self.worker_id, reason=reason, serve_anyway=True
        )
        log.info("worker offline", worker_id=self.worker_id, reason=reason, job_id=lost_job)
        self._announce()

    # --- jobs ----------------------------------------------------------------------

    def on_reserve(self, job_id: str) -> bool:
        if not self.schedulable:
            return False
        WORKER_LIFECYCLE.fire(self, "assign")
        self.current_job_id = job_id
        self._show()
        return True

    async def on_cancel_reservation(self, job_id: str) -> None:
        if self.current_job_id == job_id and self.state == WorkerState.BUSY:
            self.current_job_id = None
            WORKER_LIFECYCLE.fire(self, "release")
        # Also when the job declined before reserving: the scheduler still counts this
        # worker as taken by that pass, so say again whether it is free.
        self._announce()

    def on_push_job(self, msg: m.PushJob) -> None:
        if self.current_job_id != msg.job_id:
            return
        self.push(msg.event, msg.job_id)
        if self.connection is None:
            # The stream closed between the reservation and this push: nobody read it.
            self.grace.start()
        # No write of this worker's row: the dispatch is committed in the job table, which
        # a restart reads to know who holds what (Fleet.start), and the event's id was
        # reserved before this message.

    async def on_job_released(self, msg: m.JobReleased) -> None:
        if self._release(msg):
            await self._after_release()

    def _release(self, msg: m.JobReleased) -> bool:
        """The release without `_after_release`; True when that must follow."""
        if self.current_job_id != msg.job_id:
            return False
        self.current_job_id = None
        self.outbox.acknowledge_job(msg.job_id)
        if self.state in (WorkerState.BUSY, WorkerState.DRAINING):
            WORKER_LIFECYCLE.fire(self, "release")
        if msg.hold_until_report_written:
            self.report_hold = msg.job_id
            self._cancel_report_hold_timer()
            if not msg.until_final_report:
                self.report_hold_timer = self.ctx.clock.call_later(
                    self.ctx.settings.report_hold_s,
                    partial(self.try_tell, m.ReportWritten(msg.job_id)),
                )
        # No write of this worker's row: the job's end (or requeue) is committed, and the
        # job table says which worker holds which job, so a restart finds it free anyway
        # (Fleet.start). The row's busy/idle and current_job_id follow at its next write.
        if self.rec.worker_type == "ephemeral" and self.state == WorkerState.DRAINING:
            self.push(ShutdownEvent(reason="worker drained after its job"))
        elif self.rec.worker_type == "ephemeral" and self.quarantined:
            self.push(ShutdownEvent(reason=f"worker quarantined: {self.rec.quarantine_reason}"))
        if msg.hold_until_report_written:
            self._show()
            return False
        return True

    async def on_report_written(self, job_id: str) -> None:
        if self._end_report_hold(job_id):
            await self._after_release()

    def _end_report_hold(self, job_id: str) -> bool:
        """True when the hold for `job_id` ended here and `_after_release` must follow."""
        if self.report_hold != job_id:
            return False
        self.report_hold = None
        self._cancel_report_hold_timer()
        return True

    def _cancel_report_hold_timer(self) -> None:
        if self.report_hold_timer is not None:
            self.report_hold_timer.cancel()
            self.report_hold_timer = None

    @property
    def _may_retire(self) -> bool:
        """Whether `_after_release` may await (an ephemeral worker asks the scheduler)."""
        return self.rec.worker_type == "ephemeral"

    async def _after_release(self) -> None:
        if self._may_retire and self.state == WorkerState.IDLE:
            self.retiring = True
            has_work = await self.ctx.scheduler.ask(m.HasWorkFor(self.view()))
            if not has_work:
                self.push(ShutdownEvent(reason="ephemeral worker finished its job"))
        self._announce()

    def on_stays_for_work(self) -> None:
        """The agent asked for more work and there is some: it may take another job."""
        if self.retiring:
            self.retiring = False
            self._announce()

    # --- admin ------------------------------------------------------------------------

    async def on_drain(self) -> dict[str, Any]:
        WORKER_LIFECYCLE.fire(self, "drain")
        await self._persist()
        if self.state != WorkerState.OFFLINE:
            self.push(DrainEvent())
            if self.rec.worker_type == "ephemeral" and self.current_job_id is None:
                self.push(ShutdownEvent(reason="worker drained"))
        self._announce()
        return self.snapshot()

    async def on_resume(self) -> dict[str, Any]:
        if not self.drain_requested:
            raise Conflict(f"worker {self.worker_id} is not draining; nothing to resume")
        WORKER_LIFECYCLE.fire(self, "resume")
        await self._persist()
        self._announce()
        return self.snapshot()

    async def on_retire(self, force: bool) -> str | None:
        # A worker that never connected has no agent to stop: it may go like an offline one.
        if self.state not in (WorkerState.OFFLINE, WorkerState.CONNECTING) and not force:
            raise Conflict(
                refused_delete_advice(
                    self.worker_id,
                    str(self.state),
                    self.rec.worker_type,
                    self.current_job_id,
                    API_FORCE,
                )
            )
        lost_job = self.current_job_id
        if self.connection is not None:
            self.push(ShutdownEvent(reason="worker deleted by an administrator"))
        if lost_job is not None and (job := self.ctx.jobs.get(lost_job)) is not None:
            job.tell(m.WorkerLost(self.worker_id, f"worker {self.worker_id} deleted"))
        self.current_job_id = None
        self.heartbeat.cancel()
        self._close_stream()
        self.ctx.scheduler.tell(m.WorkerChanged(self.worker_id, None, schedulable=False))
        return lost_job

    # --- helpers ----------------------------------------------------------------------

    async def _persist(self, **extra: Any) -> None:
        saved = await self.ctx.persistence.save_worker_state(
            self.worker_id,
            expected=self.saved_state,
            state=self.state,
            drain_requested=self.drain_requested,
            current_job_id=self.current_job_id,
            **extra,
        )
        if not saved:
            # Only this actor writes its row, so this means the row is gone or was edited
            # by hand; the in-memory state stays authoritative until the next restart.
            log.error("worker row out of step", worker_id=self.worker_id, state=self.state)
        self.saved_state = self.state

    def _show(self) -> None:
        """The worker's snapshot to the live pages, built only when one is listening."""
        if self.ctx.hub.wants("worker"):
            self.ctx.hub.publish("worker", worker=self.snapshot())

    def _announce(self) -> None:
        """Tell the scheduler whether this worker can take a job now, and the pages.

        A worker that is not offline stays in the scheduler's fleet even without a
        stream (``connected=False``): it takes no job, but wait reasons mention it."""
        known = self.state != WorkerState.OFFLINE
        self.ctx.scheduler.tell(
            m.WorkerChanged(
                self.worker_id, self.view() if known else None, schedulable=self.schedulable
            )
        )
        self._show()
