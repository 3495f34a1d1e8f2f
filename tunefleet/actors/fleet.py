"""Fleet: the orchestrator's facade. HTTP handlers call it; it turns each request
into messages to the worker, job and scheduler actors, and builds the actors from
storage when the orchestrator starts (so a restart loses nothing)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, cast

import structlog

from tunefleet.actors import job_stop, preemption
from tunefleet.actors import messages as m
from tunefleet.actors.context import FleetContext
from tunefleet.actors.errors import ActorError
from tunefleet.actors.fair_share import TeamQuota, UsageLedger
from tunefleet.actors.fair_share_state import FairShareState, Preempter
from tunefleet.actors.job_actor import JobActor
from tunefleet.actors.log_intake import ended_job_refusal, live_attempt
from tunefleet.actors.records import JobRecord, WorkerRecord
from tunefleet.actors.scheduler import Scheduler
from tunefleet.actors.stream import StreamConnection
from tunefleet.actors.supervisor import Supervisor
from tunefleet.actors.tenancy_limits import ConcurrencyLimits
from tunefleet.actors.worker_actor import WorkerActor
from tunefleet.audit import AuditEntry, AuditKind
from tunefleet.errors import Conflict, Forbidden, NotFound
from tunefleet.fsm.job import JobState
from tunefleet.fsm.worker import WorkerState
from tunefleet.protocol.status import TERMINAL_STATUSES
from tunefleet.storage.log_quota import LogAppend
from tunefleet.usage import AttemptSpan

log = structlog.get_logger(__name__)

AttemptSpans = Callable[[float | None, float | None], Awaitable[list[AttemptSpan]]]

LOCAL_WORKER_ID = "w_local"


def new_worker_id() -> str:
    return "w_" + secrets.token_hex(6)


def new_job_id() -> str:
    return "j_" + secrets.token_hex(8)


class Fleet:
    def __init__(self, ctx: FleetContext) -> None:
        self.ctx = ctx
        self.worker_tokens: dict[str, str] = {}  # token hash → worker id
        self._names_in_creation: set[str] = set()  # two creates of one name at once
        self.limits = ConcurrencyLimits()  # as last told to the scheduler
        self.quotas: dict[str, TeamQuota] = {}  # likewise (fair_share.py)
        self.fair = FairShareState(ctx.settings.fair_share)
        self.fair.preempter = self.preempt  # a reclaim stops its victim as the API does
        self._attempt_spans: AttemptSpans | None = None

    # --- lifecycle --------------------------------------------------------------------

    async def start(self, local_worker: WorkerRecord | None = None) -> None:
        ctx = self.ctx
        # The stored limits hold from the first pass over the restored queue.
        self.fair.set_quotas(self.quotas)
        ctx.scheduler = ctx.system.spawn(Scheduler(ctx, self.limits, self.fair))
        ctx.supervisor = ctx.system.spawn(Supervisor(ctx, self._remove_worker))
        self.worker_tokens = await ctx.persistence.worker_token_hashes()
        live_jobs = await ctx.persistence.load_live_jobs()
        # The job table is the authority on who holds what: a dispatch is committed
        # there first, so a worker row written a moment later may lag behind it.
        holders = {
            job.worker_id: job.job_id
            for job in live_jobs
            if job.state != JobState.PENDING and job.worker_id
        }
        for worker in await ctx.persistence.load_workers():
            # An offline worker holds nothing (a crash came between its loss and its
            # job's requeue): the job is requeued below.
            online = worker.state != WorkerState.OFFLINE
            self._spawn_worker(worker, holds=holders.get(worker.worker_id) if online else None)
        if local_worker is not None:
            await self._ensure_local_worker(local_worker)
        for job in live_jobs:
            await self._restore_job(job)
        log.info(
            "fleet restored",
            workers=len(ctx.workers),
            live_jobs=len(live_jobs),
        )

    async def stop(self) -> None:
        await self.ctx.system.stop_all(drain=True)
        await self.ctx.persistence.flush_heartbeats()

    def _spawn_worker(self, rec: WorkerRecord, holds: str | None = None) -> WorkerActor:
        actor = WorkerActor(self.ctx, rec)
        actor.current_job_id = holds
        if holds is not None and actor.state == WorkerState.IDLE:
            actor.state = WorkerState.BUSY
        elif holds is None and actor.state == WorkerState.BUSY:
            # Its job was requeued or ended (committed first) and its own row lagged.
            actor.state = WorkerState.IDLE
        self.ctx.workers[rec.worker_id] = actor
        self.ctx.system.spawn(actor)
        return actor

    async def _ensure_local_worker(self, rec: WorkerRecord) -> None:
        existing = self.ctx.workers.get(rec.worker_id)
        if existing is None:
            await self.ctx.persistence.create_worker(rec, token_hash=None)
            self._spawn_worker(rec)

    async def _restore_job(self, rec: JobRecord) -> None:
        actor = JobActor(self.ctx, rec)
        self.ctx.jobs[rec.job_id] = actor
        self.ctx.system.spawn(actor)
        if rec.state == JobState.PENDING_APPROVAL:
            return  # never scheduled until decided: the scheduler does not hear of it
        if rec.state == JobState.PENDING:
            self.ctx.scheduler.tell(m.JobWaiting(actor.pending_view()))
            return
        worker = self.ctx.workers.get(rec.worker_id or "")
        if worker is None:
            actor.tell(m.WorkerLost(rec.worker_id or "?", "worker no longer exists"))
            return
        if worker.state == WorkerState.OFFLINE:
            reason = f"worker {worker.worker_id} lost: offline when the orchestrator restarted"
            actor.tell(m.WorkerLost(worker.worker_id, reason))
            return
        if actor.stop_reason is not None:
            # Stopping when the orchestrator went down: ask again, never start it again.
            job_stop.repeat_stop_request(actor)
        elif actor.preempt_reason is not None:
            preemption.repeat_preempt_request(actor)
        elif rec.state == JobState.DISPATCHED:
            # The push may not have reached the agent before the restart: send it again.
            await actor.renew_upload_credentials()
            worker.tell(m.PushJob(rec.job_id, actor.submit_event()))
            actor.arm_ack_timeout()
        elif rec.state == JobState.RUNNING:
            actor.arm_run_timeout(elapsed_s=self.ctx.clock.time() - (rec.started_at or 0.0))

    async def _remove_worker(self, worker_id: str, reason: str) -> None:
        worker = self.ctx.workers.get(worker_id)
        if worker is None:
            return
        await worker.ask(m.Retire(force=True))
        self.ctx.workers.pop(worker_id, None)
        self._forget_tokens(worker_id)
        await self.ctx.persistence.delete_worker(worker_id)
        await self.ctx.system.stop(worker)
        await self.ctx.audit.record(
            AuditKind.WORKER_DELETED,
            actor="supervisor",
            target=worker_id,
            reason=reason,
            serve_anyway=True,  # the health check's own deletion: nobody to refuse
        )
        self.ctx.hub.publish("worker_deleted", worker_id=worker_id)

    def _forget_tokens(self, worker_id: str) -> None:
        for token_hash in [h for h, w in self.worker_tokens.items() if w == worker_id]:
            del self.worker_tokens[token_hash]

    # --- lookups ------------------------------------------------------------------------

    def worker(self, worker_id: str) -> WorkerActor:
        actor = self.ctx.workers.get(worker_id)
        if actor is None:
            raise NotFound(f"Worker not found: {worker_id}")
        return actor

    def worker_for_token(self, token_hash: str) -> str | None:
        return self.worker_tokens.get(token_hash)

    # --- worker endpoints -----------------------------------------------------------------

    async def register(self, worker_id: str, msg: m.Register) -> dict[str, Any]:
        return cast(dict[str, Any], await self.worker(worker_id).ask(msg))

    async def open_stream(self, worker_id: str, last_event_id: int | None) -> StreamConnection:
        conn = await self.worker(worker_id).ask(m.OpenStream(last_event_id))
        return cast(StreamConnection, conn)

    def close_stream(self, worker_id: str, conn: StreamConnection) -> None:
        worker = self.ctx.workers.get(worker_id)
        if worker is not None and worker.alive:
            worker.tell(m.CloseStream(conn.connection_id))

    async def heartbeat(self, worker_id: str, msg: m.HeartbeatReceived) -> bool:
        return cast(bool, await self.worker(worker_id).ask(msg))

    async def report_status(
        self, worker_id: str, job_id: str, msg: m.StatusReported
    ) -> dict[str, Any]:
        job = self.ctx.jobs.get(job_id)
        if job is not None:
            return cast(dict[str, Any], await job.ask(msg))
        preemption.release_owed_report(self.ctx, worker_id, job_id, msg.status)
        return await self._report_on_ended_job(worker_id, job_id, msg.status)

    async def _report_on_ended_job(
        self, worker_id: str, job_id: str, status: str
    ) -> dict[str, Any]:
        row = await self.ctx.persistence.job_summary(job_id)
        if row is None:
            raise NotFound(f"Job not found: {job_id}")
        state, assigned, attempt_workers = row
        if worker_id not in attempt_workers:
            raise Forbidden("Worker not assigned to this job")
        if assigned == worker_id and status == state:
            return {"success": True}  # a retried final report: same answer as the first
        if assigned == worker_id and status not in TERMINAL_STATUSES:
            return {"success": True, "status": state}
        raise Conflict(f"job {job_id} is already {state}; stop reporting on it")

    def report_written(self, worker_id: str, job_id: str) -> None:
        worker = self.ctx.workers.get(worker_id)
        if worker is not None and worker.alive:
            worker.tell(m.ReportWritten(job_id))

    async def report_logs(
        self, worker_id: str, job_id: str, attempt: int | None, lines: list[dict[str, Any]]
    ) -> LogAppend:
        """Store a batch of a live attempt's lines within its quota (log_intake.py)."""
        job = self.ctx.jobs.get(job_id)
        if job is None:
            row = await self.ctx.persistence.job_summary(job_id)
            if row is None:
                raise NotFound(f"Job not found: {job_id}")
            if worker_id not in row[2]:
                raise Forbidden("Worker not assigned to this job")
            raise ended_job_refusal(job_id, row[0], attempt)
        number = live_attempt(job, worker_id, attempt)
        quota = self.ctx.settings.limits.max_log_bytes_per_attempt
        result = await self.ctx.persistence.append_logs(job_id, number, lines, quota)
        if result.stored or result.marker:
            # Followers read the stored lines back; dropped ones are never sent on.
            self.ctx.hub.publish(
                "job_logs", job_id=job_id, attempt=number, lines=lines[: result.stored]
            )
        return result

    async def has_work_for(self, worker_id: str) -> bool:
        worker = self.worker(worker_id)
        has_jobs = cast(bool, await self.ctx.scheduler.ask(m.HasWorkFor(worker.view())))
        if has_jobs:
            worker.tell(m.StaysForWork())
        return has_jobs

    async def disconnect(self, worker_id: str) -> None:
        await self.worker(worker_id).ask(m.Disconnected())

    # --- admin -------------------------------------------------------------------------

    async def list_workers(self, status: str | None = None) -> list[dict[str, Any]]:
        snapshots = [w.snapshot() for w in self.ctx.workers.values()]
        if status is not None:
            snapshots = [s for s in snapshots if s["status"] == status]
        snapshots.sort(key=lambda s: (s["created_at"] or "", s["worker_id"]))
        return snapshots

    async def get_worker(self, worker_id: str) -> dict[str, Any]:
        return self.worker(worker_id).snapshot()

    async def create_worker(
        self,
        name: str,
        worker_type: str,
        labels: dict[str, str],
        token_hash: str,
        actor: str,
        *,
        allow_duplicate: bool = False,
    ) -> dict[str, Any]:
        # Names are how people tell workers apart (lists, logs, the CLI): one name, one
        # worker, unless asked otherwise.
        if not allow_duplicate:
            self._check_name_free(name)
        self._names_in_creation.add(name)
        try:
            return await self._create_worker(name, worker_type, labels, token_hash, actor)
        finally:
            self._names_in_creation.discard(name)

    def _check_name_free(self, name: str) -> None:
        same = next((w.worker_id for w in self.ctx.workers.values() if w.rec.name == name), None)
        if same is not None or name in self._names_in_creation:
            raise Conflict(
                f"a worker named {name!r} exists{f' ({same})' if same else ''}; choose another "
                "name, or send ?allow_duplicate=true (tunefleet workers create --allow-duplicate)"
            )

    async def _create_worker(
        self, name: str, worker_type: str, labels: dict[str, str], token_hash: str, actor: str
    ) -> dict[str, Any]:
        rec = WorkerRecord(
            worker_id=new_worker_id(),
            name=name,
            worker_type=worker_type,
            state=WorkerState.CONNECTING,
            labels=dict(labels),
            created_at=self.ctx.clock.time(),
        )
        await self.ctx.persistence.create_worker(rec, token_hash=token_hash)
        self.worker_tokens[token_hash] = rec.worker_id
        actor_ = self._spawn_worker(rec)
        await self.ctx.audit.record(
            AuditKind.WORKER_CREATED,
            actor=actor,
            target=rec.worker_id,
            name=name,
            worker_type=worker_type,
            labels=labels,
        )
        snapshot = actor_.snapshot()
        self.ctx.hub.publish("worker", worker=snapshot)
        return snapshot

    async def drain(self, worker_id: str, actor: str) -> dict[str, Any]:
        snapshot = cast(dict[str, Any], await self.worker(worker_id).ask(m.Drain()))
        await self.ctx.audit.record(AuditKind.WORKER_DRAINED, actor=actor, target=worker_id)
        return snapshot

    async def resume(self, worker_id: str, actor: str) -> dict[str, Any]:
        snapshot = cast(dict[str, Any], await self.worker(worker_id).ask(m.Resume()))
        await self.ctx.audit.record(AuditKind.WORKER_RESUMED, actor=actor, target=worker_id)
        return snapshot

    async def quarantine(
        self, worker_id: str, reason: str, actor: str = "orchestrator"
    ) -> dict[str, Any]:
        """Take no new job on ``worker_id`` (a bad machine), keeping its current one; the
        one seam for every rule that finds a machine bad (failures here, GPU health).
        Audited and counted by the worker actor; 409 if it already is quarantined."""
        return cast(dict[str, Any], await self.worker(worker_id).ask(m.Quarantine(reason, actor)))

    async def release_quarantine(self, worker_id: str, actor: str) -> dict[str, Any]:
        """The worker takes jobs again; 409 if it is not quarantined."""
        return cast(dict[str, Any], await self.worker(worker_id).ask(m.Unquarantine(actor)))

    async def rotate_token(self, worker_id: str, token_hash: str, actor: str) -> None:
        worker = self.worker(worker_id)
        if worker.rec.is_local:
            raise Conflict("the built-in local worker has no token")
        # Forget the old token first: from this instant it authenticates nothing.
        self._forget_tokens(worker_id)
        await self.ctx.persistence.set_worker_token(worker_id, token_hash)
        self.worker_tokens[token_hash] = worker_id
        await worker.ask(m.TokenRotated())
        await self.ctx.audit.record(AuditKind.WORKER_TOKEN_ROTATED, actor=actor, target=worker_id)

    async def delete_worker(self, worker_id: str, force: bool, actor: str) -> str | None:
        worker = self.worker(worker_id)
        if worker.rec.is_local:
            raise Conflict(
                "the built-in local worker cannot be deleted; start with --no-local-runner"
            )
        lost_job = cast(str | None, await worker.ask(m.Retire(force=force)))
        self.ctx.workers.pop(worker_id, None)
        self._forget_tokens(worker_id)
        await self.ctx.persistence.delete_worker(worker_id)
        await self.ctx.system.stop(worker)
        await self.ctx.audit.record(
            AuditKind.WORKER_DELETED, actor=actor, target=worker_id, force=force, job=lost_job
        )
        self.ctx.hub.publish("worker_deleted", worker_id=worker_id)
        return lost_job

    # --- queue -------------------------------------------------------------------------

    async def submit(
        self, rec: JobRecord, actor: str, *, held: str | None = None
    ) -> dict[str, Any]:
        """Queue (or place) a new job; ``held``: why an approval rule holds it, and then it
        is stored awaiting approval and the scheduler does not hear of it."""
        rec.job_id = new_job_id()
        rec.state = JobState.PENDING if held is None else JobState.PENDING_APPROVAL
        rec.submitted_by = actor
        rec.submitted_at = self.ctx.clock.time()
        if self.ctx.artifacts is not None:
            self.ctx.artifacts.note_new_job(rec.job_id)
        event = self.ctx.audit.entry(
            AuditKind.JOB_SUBMITTED,
            actor=actor,
            target=rec.job_id,
            config_name=rec.config_name,
            target_kind=rec.target,
        )
        job = JobActor(self.ctx, rec)
        if held is not None:
            rec.wait_reason = held
            rec.seq = await self.ctx.persistence.create_job(rec, event)
            self._adopt_job(job)
            self.ctx.hub.publish("job", job_id=rec.job_id, status=rec.state)
            return _submitted(rec.job_id, rec.state, None, None, held)
        placement = await self._reserve_for_new_job(job)
        if isinstance(placement, WorkerActor):
            # Shielded: a caller gone mid-commit must not leave the job stored and
            # its worker reserved with nobody to push it.
            await asyncio.shield(self._submit_placed(job, placement, event))
            # What this submission stored is the answer: no ask to the job (it may be
            # busy with its worker's first report already) nor to the scheduler.
            self.ctx.hub.publish("job", job_id=rec.job_id, status=JobState.DISPATCHED)
            return _submitted(rec.job_id, JobState.DISPATCHED, placement.worker_id, None, None)
        # Stored with the reason the scheduler gave: one write, not a second for it.
        rec.wait_reason = placement
        return await self._submit_queued(job, event)

    async def _reserve_for_new_job(self, job: JobActor) -> WorkerActor | str | None:
        """An idle worker reserved for a job not yet stored, when one fits and no older
        pending job could take it (the scheduler decides); else why the job will wait,
        or None when that is not known yet (a reservation failed): it queues as usual."""
        placement = await self.ctx.scheduler.ask(m.PlaceNewJob(job.pending_view()))
        if isinstance(placement, m.MustWait):
            return placement.reason
        worker = self.ctx.workers.get(placement) if isinstance(placement, str) else None
        if worker is None:
            return None
        try:
            reserved = await worker.ask(m.ReserveForJob(job.job_id))
        except ActorError:  # stopped, or too slow: undo a reservation it makes late
            worker.try_tell(m.CancelReservation(job.job_id))
            return None
        # Declined: no longer free (its stream closed meanwhile). It tells the scheduler
        # when it is free again, as after any declined reservation.
        return worker if reserved else None

    async def _submit_queued(self, job: JobActor, event: AuditEntry) -> dict[str, Any]:
        """One commit for the job, then one ask that queues it and answers where it
        stands; the job's actor is asked only when the scheduler dispatched it already."""
        rec = job.rec
        # Its audit line is written with the commit, before the dispatch's can be.
        rec.seq = await self.ctx.persistence.create_job(rec, event)
        self._adopt_job(job)
        place = await self.ctx.scheduler.ask(m.QueueNewJob(job.pending_view()))
        position, reason = cast(tuple[int | None, str | None], place)
        if reason is not None and reason != rec.wait_reason:
            # A worker changed between the placement and the queueing (or a reservation
            # failed): the stored reason follows what the answer says.
            rec.wait_reason = reason
            await self.ctx.persistence.save_wait_reason(rec.job_id, reason)
        if position is not None and job.state == JobState.PENDING:
            state, worker_id = str(JobState.PENDING), None
        else:
            # Dispatched (or ended) before the answer: its actor says how it stands.
            snapshot: dict[str, Any] = (
                cast(dict[str, Any], await job.ask(m.Snapshot()))
                if job.alive
                else {"state": rec.state}
            )
            state, worker_id = snapshot["state"], snapshot.get("worker_id")
            position = (await self.position(rec.job_id))["position"]
        self.ctx.hub.publish("job", job_id=rec.job_id, status=state)
        return _submitted(rec.job_id, state, worker_id, position, reason)

    async def _submit_placed(self, job: JobActor, worker: WorkerActor, event: AuditEntry) -> None:
        """One commit for the submission and the dispatch; the job_submit is pushed after
        it, then the actor runs as if it had been dispatched from the queue."""
        push = await job.store_placed(worker, event)
        self._adopt_job(job)  # before its worker can report on it: the push comes after
        # An idle worker (its event ids reserved) answers at once: the job_submit is on its
        # stream with no task or loop turn between. A worker stopped, stuck or crashed on it
        # meanwhile (the actor logs and recovers its own crash): the job is stored, so the
        # submitter hears so, and the acknowledgement timeout, armed already, requeues it.
        with contextlib.suppress(Exception):
            await worker.ask(push)

    def _adopt_job(self, job: JobActor) -> None:
        self.ctx.jobs[job.job_id] = job
        self.ctx.system.spawn(job)

    async def cancel(self, job_id: str, actor: str, reason: str | None = None) -> dict[str, Any]:
        job = self.ctx.jobs.get(job_id)
        if job is None:
            row = await self.ctx.persistence.job_summary(job_id)
            if row is None:
                raise NotFound(f"Job not found: {job_id}")
            raise Conflict(f"job {job_id} is already {row[0]}; nothing to cancel")
        why = f"cancelled by {actor}" + (f": {reason}" if reason else "")
        return cast(dict[str, Any], await job.ask(m.CancelJob(why, actor)))

    async def preempt(self, job_id: str, reason: str, actor: str = "scheduler") -> dict[str, Any]:
        """Stop the job's attempt so its worker can take other work (preemption.py): it
        goes back to the head of its priority band, spends no retry, and resumes from its
        newest stored checkpoint. NotFound; NotPreemptible (409) unless dispatched or
        running and not being stopped already."""
        job = self.ctx.jobs.get(job_id)
        if job is None:
            row = await self.ctx.persistence.job_summary(job_id)
            if row is None:
                raise NotFound(f"Job not found: {job_id}")
            raise preemption.not_preemptible(job_id, row[0])
        return cast(dict[str, Any], await job.ask(m.PreemptJob(reason, actor)))

    # --- concurrency limits (tenancy_limits.py) ------------------------------------------

    def set_limits(self, limits: ConcurrencyLimits) -> None:
        """The scheduler goes by these from its next pass; running jobs are not touched."""
        self.limits = limits
        self.ctx.scheduler.tell(m.SetConcurrencyLimits(limits))

    async def set_quotas(self, quotas: dict[str, TeamQuota]) -> None:
        """The next passes order and reclaim by these (fair_share.py). Fair share
        switched on (it was off: nothing was counted meanwhile) reads the usage afresh
        from the stored attempts first."""
        was_on = self.fair.active
        self.quotas = quotas
        if not was_on and any(not q.is_default for q in quotas.values()):
            await self._read_usage()
        self.ctx.scheduler.tell(m.SetTeamQuotas(quotas))

    def set_preempter(self, preempt: Preempter | None) -> None:
        """The one seam a reclaim stops a job through: ``preempt(job_id, reason)``."""
        self.fair.preempter = preempt

    async def load_usage(self, spans: AttemptSpans) -> None:
        """Fair-share standing from the stored attempts (before start), when fair share
        is on; ``spans`` is kept to read them again whenever it is switched on."""
        self._attempt_spans = spans
        if self.quotas or self.fair.rules.priority_preemption:
            await self._read_usage()

    async def _read_usage(self) -> None:
        """The attempts ended within 20 half-lives (older ones count less than a
        millionth), into a fresh ledger: those running are seen by the next pass."""
        if self._attempt_spans is None:
            return
        self.fair.ledger = UsageLedger(self.fair.ledger.half_life_s)
        since = self.ctx.clock.time() - 20 * self.fair.ledger.half_life_s
        self.fair.load_attempts(await self._attempt_spans(since, None))

    async def quota_standings(self) -> dict[str, Any]:
        return cast(dict[str, Any], await self.ctx.scheduler.ask(m.QuotaStandings()))

    def fleet_gpus(self) -> int:
        """GPUs of the workers the scheduler knows now (a team limit above it is warned)."""
        return sum(view.gpu_count for view in self.ctx.scheduler.fleet.values())

    async def decide_approval(
        self, job_id: str, actor: str, *, approve: bool, reason: str | None = None
    ) -> dict[str, Any]:
        """Approve (it queues in its original place) or reject (it ends cancelled) a job
        awaiting approval; NotFound, or Conflict when it is not awaiting approval."""
        job = self.ctx.jobs.get(job_id)
        if job is None:
            row = await self.ctx.persistence.job_summary(job_id)
            if row is None:
                raise NotFound(f"Job not found: {job_id}")
            raise Conflict(f"job {job_id} is {row[0]}, not awaiting approval; nothing to decide")
        decision = m.DecideApproval(approve, actor, reason)
        return cast(dict[str, Any], await job.ask(decision))

    async def position(self, job_id: str) -> dict[str, Any]:
        job = self.ctx.jobs.get(job_id)
        if job is None:
            row = await self.ctx.persistence.job_summary(job_id)
            if row is None:
                raise NotFound(f"Job not found: {job_id}")
            return {"job_id": job_id, "position": None, "status": row[0], "reason": None}
        if job.state != JobState.PENDING:
            # A held job is in no queue; its reason says who may release it.
            held = job.rec.wait_reason if job.state == JobState.PENDING_APPROVAL else None
            return {"job_id": job_id, "position": None, "status": str(job.state), "reason": held}
        place = await self.ctx.scheduler.ask(m.QueuePlace(job_id))
        position, reason = cast(tuple[int | None, str | None], place)
        return {
            "job_id": job_id,
            "position": position,
            "status": JobState.PENDING,
            "reason": reason,
        }

    async def wait_reason(self, job_id: str) -> str | None:
        job = self.ctx.jobs.get(job_id)
        if job is None or job.state != JobState.PENDING:
            return None
        return cast(str | None, await self.ctx.scheduler.ask(m.ExplainWait(job_id)))

    async def stats(self) -> dict[str, Any]:
        counts = await self.ctx.persistence.job_counts()
        workers = {state.value: 0 for state in WorkerState}
        for w in self.ctx.workers.values():
            workers[w.state] = workers.get(w.state, 0) + 1
        return {
            "queue_depth": counts.get(JobState.PENDING, 0),
            # Then one count per other state, named as the state: "dispatched", "running"...
            **{str(state): counts.get(state, 0) for state in JobState if state != JobState.PENDING},
            "avg_wait_seconds": await self.ctx.persistence.average_wait_s(),
            "workers": {"total": len(self.ctx.workers), **workers},
        }


def _submitted(
    job_id: str, state: str, worker_id: str | None, position: int | None, reason: str | None
) -> dict[str, Any]:
    """The answer to a submission (the seed document's fields)."""
    return {
        "success": True,
        "job_id": job_id,
        "status": str(state),
        "allocated_worker_id": worker_id,
        "queue_position": position,
        "reason": reason,
        "error": None,
    }
