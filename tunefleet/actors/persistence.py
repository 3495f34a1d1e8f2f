"""The durable writes the orchestrator's actors ask for, each one transaction.

Actors speak in domain steps (a dispatch, an acknowledgement, a requeue, an end);
this module turns each step into compare-and-set updates plus the attempt, timeline
and audit rows that go with it, so a step is recorded whole or not at all, in one
commit. The audit events' JSON lines are written on the database thread once that
commit is done (one write for a whole write group's), before the step's caller hears
back: no hand-off of their own to the audit file's thread and back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from tunefleet.actors.clock import Clock, Timer
from tunefleet.actors.records import JobRecord, WorkerRecord
from tunefleet.actors.retry_policy import PastFailure
from tunefleet.actors.stored_records import insert_submitted, job_record, worker_record
from tunefleet.audit import AuditEntry, AuditLog
from tunefleet.errors import Conflict
from tunefleet.fsm.failure_kinds import INFRA_BUDGET_KINDS, FailureKind
from tunefleet.fsm.job import PREEMPTED, TERMINAL_JOB_STATES, JobState
from tunefleet.protocol.events import DEFAULT_CANCEL_REASON
from tunefleet.storage.log_quota import LogAppend
from tunefleet.storage.store import Repos, Store
from tunefleet.storage.store_metrics import metric_point
from tunefleet.webhooks.outbox import WebhookOutbox, worker_event_of

T = TypeVar("T")

_LIVE = tuple(state for state in JobState if state not in TERMINAL_JOB_STATES)
# Heartbeats seen within this many seconds share one write.
HEARTBEAT_FLUSH_S = 1.0

log = structlog.get_logger(__name__)
# Timeline kind: the orchestrator asked the agent to stop the job (cancel or timeout).
STOP_REQUESTED = "stop_requested"
# The outcome of an attempt whose job_submit never reached its worker (and the timeline
# flag that says so); such an attempt spends no retry.
UNDELIVERED = "undelivered"


@dataclass(frozen=True, slots=True)
class _LogLine:
    seq: int
    stream: str
    line: str
    at: float


class Persistence:
    def __init__(
        self, store: Store, audit: AuditLog | None = None, webhooks: WebhookOutbox | None = None
    ) -> None:
        """``audit`` writes the lines of the audit events stored with a step; without it
        (tests of other steps) a step that stores an audit event is refused. ``webhooks``:
        the outbox each step's webhook events join, in the step's transaction."""
        self.store = store
        self._audit = audit
        self.webhooks = webhooks if webhooks is not None else WebhookOutbox()
        self._audit_lines_wired = False
        self._beats: dict[str, WorkerRecord] = {}
        self._flush_timer: Timer | None = None
        self._flushing: set[asyncio.Future[None]] = set()
        # A finished job's final numbers, for its webhook event (commit_end sets them).
        self._final: dict[Any, dict[str, Any] | None] = {}

    async def _audited(self, fn: Callable[[Repos], T], *events: AuditEntry) -> T:
        """``fn`` and the audit rows of ``events`` (after its own rows) in one write; the
        events' lines are on file when this returns, written by the database thread right
        after the commit. If the write fails, neither rows nor lines are written."""
        audit = self._audit
        if audit is None:
            raise RuntimeError("this Persistence has no audit log to write the lines to")
        if not self._audit_lines_wired:
            # A write group's staged lines in one write, once the group has committed.
            self.store.db.on_commit(audit.write_staged)
            self._audit_lines_wired = True

        webhooks = self.webhooks

        def write(repos: Repos) -> tuple[T, list[Any]]:
            value = fn(repos)
            if webhooks.active:  # the one cheap check when nobody subscribed
                for event in events:
                    target = event.fields.get("target")
                    webhooks.stage_audited(repos, event.kind, target, self._final.get(target))
            return value, [
                repos.audit.add(event.kind, at=event.at, **event.fields) for event in events
            ]

        def lines(written: tuple[T, list[Any]]) -> None:
            audit.stage_committed(zip(events, written[1], strict=True))

        value, _ = await self.store.atomically(write, after_commit=lines)
        return value

    # --- loading at start ---------------------------------------------------------------

    async def load_workers(self) -> list[WorkerRecord]:
        return [worker_record(row) for row in await self.store.list_workers()]

    async def load_live_jobs(self) -> list[JobRecord]:
        jobs = [job_record(row) for row in await self.store.nonterminal_jobs()]
        for job in jobs:
            if job.attempts > 0:  # a job never dispatched has nothing in its timeline to read
                await self._load_from_timeline(job)
        return jobs

    async def _load_from_timeline(self, job: JobRecord) -> None:
        """A stop asked for before a restart still stands (the agent may confirm it later),
        dispatches that never reached their worker and preempted attempts still spend no
        retry, a job whose last attempt was preempted still waits at the head of its
        priority band, and the kinds of its ended attempts still count (infrastructure
        budget, poison, avoided workers)."""
        for attempt in await self.store.list_attempts(job.job_id):
            if attempt.ended_at is None or attempt.kind is None:
                continue
            kind = FailureKind(attempt.kind)
            job.failures.append(PastFailure(attempt.worker_id, kind, attempt.signature))
            if kind in INFRA_BUDGET_KINDS:
                job.infra_failures += 1
        for event in await self.store.list_job_events(job.job_id):
            if event.kind == "requeued" and event.detail.get(UNDELIVERED):
                job.undelivered += 1
            if event.kind in (PREEMPTED, "requeued", JobState.DISPATCHED):
                job.preempted += event.kind == PREEMPTED
                job.preempted_last = event.kind == PREEMPTED
            if job.state == JobState.PENDING:
                continue
            if event.kind == STOP_REQUESTED and event.attempt == job.attempts:
                reason = str(event.detail.get("reason") or DEFAULT_CANCEL_REASON)
                if event.detail.get("preempt"):
                    job.preempt_reason = reason
                    continue
                job.stop_reason = reason
                job.stop_is_timeout = bool(event.detail.get("timeout"))

    async def worker_token_hashes(self) -> dict[str, str]:
        return {t.token_hash: t.worker_id for t in await self.store.list_worker_tokens()}

    # --- workers ------------------------------------------------------------------------

    async def create_worker(self, rec: WorkerRecord, token_hash: str | None) -> None:
        await self.store.create_worker(
            rec.worker_id,
            name=rec.name,
            worker_type=rec.worker_type,
            state=rec.state,
            token_hash=token_hash,
            is_local=rec.is_local,
            labels=rec.labels,
            gpu_info=rec.gpu_info,
            gpu_count=rec.gpu_count,
            gpu_name=rec.gpu_name,
            gpu_vram_gb=rec.gpu_vram_gb,
            accelerator_type=rec.accelerator_type,
        )

    async def save_worker_state(
        self, worker_id: str, expected: str, state: str, **fields: Any
    ) -> bool:
        """Compare-and-set: False when storage no longer holds ``expected``. A worker
        coming online or going offline is a webhook event, stored with the change."""
        kind = worker_event_of(expected, state) if self.webhooks.active else None
        if kind is None:
            return await self.store.cas_worker_state(worker_id, expected, state, **fields)
        webhooks = self.webhooks

        def save(repos: Repos) -> bool:
            moved = repos.workers.cas_state(worker_id, expected, state, **fields)
            if moved:
                webhooks.stage_worker(repos, kind, worker_id)
            return moved

        return await self.store.atomically(save)

    async def note_worker_quarantined(self, worker_id: str, reason: str) -> None:
        """The ``worker.quarantined`` webhook event (issue 27), for the quarantine to call
        once it has stored its change; inside its own transaction, call
        ``self.webhooks.stage_worker(repos, "worker.quarantined", worker_id, reason=...)``
        instead, so the event commits with it."""
        if not self.webhooks.active:
            return
        webhooks = self.webhooks
        await self.store.atomically(
            lambda repos: webhooks.stage_worker(
                repos, "worker.quarantined", worker_id, reason=reason
            )
        )

    def heartbeat_seen(self, rec: WorkerRecord, clock: Clock) -> None:
        """Write this worker's heartbeat columns with the others of the next
        HEARTBEAT_FLUSH_S, in one write. Deadlines and views use the in-memory record;
        the row only serves people and a restart, which may see it a second late, while
        a write per heartbeat would cost more than the rest of the heartbeat together."""
        self._beats[rec.worker_id] = rec
        if self._flush_timer is None:
            self._flush_timer = clock.call_later(HEARTBEAT_FLUSH_S, self._flush_soon)

    def _flush_soon(self) -> None:
        self._flush_timer = None
        task = asyncio.ensure_future(self.flush_heartbeats())
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def flush_heartbeats(self) -> None:
        """Write the heartbeats seen since the last flush (at once: at shutdown)."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        beats, self._beats = self._beats, {}
        if not beats:
            return
        try:
            await self.store.save_heartbeats(list(beats.values()))
        except Exception as error:
            # Keep them for the next flush; a later heartbeat replaces its worker's entry.
            log.warning("heartbeats not saved", workers=len(beats), error=str(error))
            for worker_id, rec in beats.items():
                self._beats.setdefault(worker_id, rec)

    async def save_worker_event_id(self, worker_id: str, last_event_id: int) -> None:
        await self.store.update_worker(worker_id, last_event_id=last_event_id)

    async def set_worker_token(self, worker_id: str, token_hash: str) -> None:
        await self.store.set_worker_token(worker_id, token_hash)

    async def delete_worker(self, worker_id: str) -> None:
        await self.store.delete_worker(worker_id)

    # --- jobs ---------------------------------------------------------------------------

    async def create_job(self, rec: JobRecord, event: AuditEntry) -> int:
        """Store a submitted job with its audit event; its seq."""

        def create(repos: Repos) -> int:
            # With the reason it waits, when the scheduler gave one before this write.
            return insert_submitted(repos, rec, state=rec.state, wait_reason=rec.wait_reason)

        return await self._audited(create, event)

    async def create_dispatched_job(
        self,
        rec: JobRecord,
        submitted: AuditEntry,
        dispatched: AuditEntry,
        upload_token_hash: str | None = None,
    ) -> int:
        """Store a job placed before it was first written: submitted and dispatched
        (state, first attempt, both timeline entries, both audit events) in ONE commit.
        The same rows as create_job then commit_dispatch; its seq."""
        worker_id, attempt, now = rec.worker_id, rec.attempts, rec.dispatched_at

        def create(repos: Repos) -> int:
            seq = insert_submitted(
                repos,
                rec,
                state=JobState.DISPATCHED,
                worker_id=worker_id,
                attempts=attempt,
                dispatched_at=now,
            )
            repos.jobs.insert_attempt(rec.job_id, attempt, worker_id=worker_id, dispatched_at=now)
            if upload_token_hash is not None:
                repos.artifacts.add_token(rec.job_id, attempt, upload_token_hash)
            repos.jobs.insert_event(
                rec.job_id, JobState.DISPATCHED, worker_id=worker_id, attempt=attempt, at=now
            )
            return seq

        return await self._audited(create, submitted, dispatched)

    async def commit_approval(self, job_id: str, now: float, event: AuditEntry) -> bool:
        """An approved job joins the queue: its seq and submit time are kept, so it waits
        in the place it would have had; False when it was no longer awaiting approval."""

        def approve(repos: Repos) -> bool:
            moved = repos.jobs.cas_state(
                job_id, JobState.PENDING_APPROVAL, JobState.PENDING, wait_reason=None
            )
            if moved:
                repos.jobs.insert_event(
                    job_id, "approved", detail={"by": event.fields.get("actor")}, at=now
                )
            return moved

        return await self._audited(approve, event)

    async def save_wait_reason(self, job_id: str, reason: str) -> None:
        await self.store.update_job(job_id, wait_reason=reason)

    async def commit_dispatch(
        self,
        rec: JobRecord,
        worker_id: str,
        attempt: int,
        now: float,
        event: AuditEntry,
        upload_token_hash: str | None = None,
    ) -> None:
        def dispatch(repos: Repos) -> None:
            moved = repos.jobs.cas_state(
                rec.job_id,
                JobState.PENDING,
                JobState.DISPATCHED,
                worker_id=worker_id,
                attempts=attempt,
                dispatched_at=now,
                wait_reason=None,
            )
            if not moved:
                raise Conflict(f"job {rec.job_id} is no longer pending")
            repos.jobs.insert_attempt(rec.job_id, attempt, worker_id=worker_id, dispatched_at=now)
            if upload_token_hash is not None:
                # The attempt's upload credential exists exactly when the dispatch does.
                repos.artifacts.add_token(rec.job_id, attempt, upload_token_hash)
            repos.jobs.insert_event(
                rec.job_id, JobState.DISPATCHED, worker_id=worker_id, attempt=attempt, at=now
            )

        await self._audited(dispatch, event)

    async def commit_start(
        self, job_id: str, attempt: int, worker_id: str | None, now: float
    ) -> None:
        def start(repos: Repos) -> None:
            repos.jobs.cas_state(job_id, JobState.DISPATCHED, JobState.RUNNING, started_at=now)
            repos.jobs.ack_attempt(job_id, attempt, started_at=now)
            repos.jobs.insert_event(job_id, "started", worker_id=worker_id, attempt=attempt, at=now)
            webhooks.stage_job(repos, "job.started", job_id)

        webhooks = self.webhooks
        await self.store.atomically(start)

    async def record_stop_request(
        self,
        job_id: str,
        attempt: int,
        worker_id: str | None,
        reason: str,
        is_timeout: bool,
        now: float,
        *,
        preempt: bool = False,
    ) -> None:
        detail: dict[str, Any] = {"reason": reason, "timeout": is_timeout}
        if preempt:
            detail["preempt"] = True  # read back at start: a preemption, not a cancel
        await self.store.append_job_event(
            job_id, STOP_REQUESTED, worker_id=worker_id, attempt=attempt, detail=detail, at=now
        )

    async def save_progress(
        self,
        job_id: str,
        progress: dict[str, Any] | None,
        now: float,
        *,
        attempt: int = 0,
        reported: dict[str, Any] | None = None,
    ) -> None:
        """The job's latest progress, and the `reported` numbers as a point of its metric
        history, in one write (which shares its commit with whatever else is queued)."""
        point = metric_point(reported) if attempt > 0 else None

        def save(repos: Repos) -> None:
            repos.jobs.update(job_id, progress=progress)
            if point is not None:
                repos.metrics.append(job_id, attempt, point[0], point[1], now)

        await self.store.atomically(save)

    async def save_metrics(
        self, job_id: str, attempt: int, reported: dict[str, Any] | None, now: float
    ) -> None:
        """A final report's numbers, as a point of the metric history."""
        point = metric_point(reported)
        if point is not None and attempt > 0:
            await self.store.append_metrics(job_id, attempt, point[0], point[1], now)

    async def commit_requeue(
        self,
        job_id: str,
        attempt: int,
        worker_id: str | None,
        reason: str,
        now: float,
        event: AuditEntry,
        *,
        undelivered: bool = False,
        kind: str | None = None,
        signature: str | None = None,
        outcome: str | None = None,
    ) -> None:
        """``outcome``: the attempt's (default: undelivered or lost); ``kind`` and
        ``signature``: its end's (fsm/failure_kinds.py), also in the timeline entry."""
        outcome = outcome or (UNDELIVERED if undelivered else "lost")
        detail: dict[str, Any] = {"reason": reason}
        if undelivered:
            detail[UNDELIVERED] = True  # read back at start: it spent no retry
        if kind is not None:
            detail["kind"] = kind
        if signature is not None:
            detail["signature"] = signature

        def requeue(repos: Repos) -> None:
            repos.jobs.cas_state(
                job_id,
                (JobState.DISPATCHED, JobState.RUNNING),
                JobState.PENDING,
                worker_id=None,
                progress=None,
            )
            repos.jobs.end_attempt(
                job_id,
                attempt,
                outcome=outcome,
                reason=reason,
                ended_at=now,
                kind=kind,
                signature=signature,
            )
            repos.jobs.insert_event(
                job_id,
                "requeued",
                worker_id=worker_id,
                attempt=attempt,
                detail=detail,
                at=now,
            )

        await self._audited(requeue, event)

    async def commit_preempted(
        self,
        job_id: str,
        attempt: int,
        worker_id: str | None,
        reason: str,
        now: float,
        event: AuditEntry,
        *,
        confirmed: bool,
    ) -> None:
        """A preempted attempt's end (outcome ``preempted``) and the job back to pending;
        its timeline entry (kind ``preempted``) is read back at start: no retry spent,
        and the job waits at the head of its priority band. ``confirmed``: the worker
        reported the stop (else the orchestrator stopped waiting for it)."""

        def requeue(repos: Repos) -> None:
            repos.jobs.cas_state(
                job_id,
                (JobState.DISPATCHED, JobState.RUNNING),
                JobState.PENDING,
                worker_id=None,
                progress=None,
            )
            repos.jobs.end_attempt(
                job_id,
                attempt,
                outcome=PREEMPTED,
                reason=reason,
                ended_at=now,
                kind=str(FailureKind.PREEMPTED),
            )
            repos.jobs.insert_event(
                job_id,
                PREEMPTED,
                worker_id=worker_id,
                attempt=attempt,
                detail={"reason": reason, "confirmed": confirmed},
                at=now,
            )

        await self._audited(requeue, event)

    async def commit_end(
        self,
        job_id: str,
        state: str,
        attempt: int,
        worker_id: str | None,
        reason: str | None,
        now: float,
        progress: dict[str, Any] | None,
        event: AuditEntry,
        *,
        reported: dict[str, Any] | None = None,
        kind: str | None = None,
        signature: str | None = None,
    ) -> None:
        """The end of a job, with a final report's numbers (``reported``) as the last point
        of its metric history, in the same commit; ``kind`` and ``signature``: its last
        attempt's end (fsm/failure_kinds.py)."""
        point = metric_point(reported) if attempt > 0 else None
        detail: dict[str, Any] = {"reason": reason} if reason else {}
        if kind is not None:
            detail["kind"] = kind
        if signature is not None:
            detail["signature"] = signature
        if self.webhooks.active:
            self._final[job_id] = point[1] if point is not None else None

        def end(repos: Repos) -> None:
            if point is not None:
                repos.metrics.append(job_id, attempt, point[0], point[1], now)
            repos.jobs.cas_state(
                job_id, _LIVE, state, finished_at=now, error=reason, progress=progress
            )
            if attempt > 0:
                repos.jobs.end_attempt(
                    job_id,
                    attempt,
                    outcome=state,
                    reason=reason,
                    ended_at=now,
                    kind=kind,
                    signature=signature,
                )
            repos.jobs.insert_event(
                job_id,
                str(state),
                worker_id=worker_id,
                attempt=attempt or None,
                detail=detail,
                at=now,
            )

        try:
            await self._audited(end, event)
        finally:
            self._final.pop(job_id, None)

    async def job_summary(self, job_id: str) -> tuple[str, str | None, set[str]] | None:
        """(state, assigned worker, every worker that had an attempt) of a stored job."""
        row = await self.store.get_job(job_id)
        if row is None:
            return None
        attempts = await self.store.list_attempts(job_id)
        return row.state, row.worker_id, {a.worker_id for a in attempts if a.worker_id}

    async def append_logs(
        self, job_id: str, attempt: int, lines: list[dict[str, Any]], max_bytes: int
    ) -> LogAppend:
        """Within the attempt's log quota of ``max_bytes`` (0: none)."""
        batch = [
            _LogLine(int(ln["seq"]), ln["stream"], ln["line"], float(ln["at"])) for ln in lines
        ]
        return await self.store.append_logs_within_quota(job_id, attempt, batch, max_bytes)

    async def job_counts(self) -> dict[str, int]:
        return await self.store.job_counts()

    async def average_wait_s(self, sample: int = 200) -> float | None:
        """Mean time from submission to first dispatch over the most recent jobs."""
        rows = await self.store.list_jobs(limit=sample)
        waits = [r.dispatched_at - r.submitted_at for r in rows if r.dispatched_at is not None]
        return round(sum(waits) / len(waits), 3) if waits else None
