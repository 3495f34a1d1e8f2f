"""Store: the durable operations actors and handlers await.

A facade over the domain repositories (store_workers, store_jobs, store_audit), which are
synchronous and run on the DB thread; each method here is one `Database.read` or
`Database.write`. The same facade runs over in-memory repositories (storage.memory).
Results are frozen dataclasses (storage.rows), never model instances.
State changes are compare-and-set: they return False instead of recording a transition
from a state the row is no longer in. Several operations that must commit together go
through `atomically`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

from tunefleet.fsm.worker import WorkerState
from tunefleet.storage.log_quota import LogAppend
from tunefleet.storage.rows import (
    ApiTokenRow,
    AttemptsApart,
    AuditEventRow,
    JobAttemptRow,
    JobEventRow,
    JobLogRow,
    JobMetricRow,
    JobRow,
    WorkerRow,
    WorkerTokenRow,
)
from tunefleet.storage.store_approvals import ApprovalRuleRecords, ApprovalRuleRepo
from tunefleet.storage.store_artifacts import ArtifactRecords, ArtifactRepo
from tunefleet.storage.store_audit import GENESIS_HASH, AuditRepo
from tunefleet.storage.store_base import MAX_PAGE, Connector, JobOwner, Now, Viewer
from tunefleet.storage.store_jobs import JobOrder, JobRepo, LogLineLike
from tunefleet.storage.store_limits import LimitRecords, LimitRepo
from tunefleet.storage.store_metrics import MetricRepo
from tunefleet.storage.store_usage import UsageRecords, UsageRepo
from tunefleet.storage.store_users import UserRecords, UserRepo
from tunefleet.storage.store_webhooks import WebhookRecords, WebhookRepo
from tunefleet.storage.store_workers import ApiTokenRepo, HeartbeatColumns, WorkerRepo

T = TypeVar("T")

States = str | Collection[str]


@dataclass(frozen=True, slots=True)
class Repos:
    """The synchronous repositories, handed to an `atomically` callable on the DB thread."""

    workers: WorkerRepo
    api_tokens: ApiTokenRepo
    jobs: JobRepo
    audit: AuditRepo
    metrics: MetricRepo = field(default_factory=MetricRepo)
    artifacts: ArtifactRepo = field(default_factory=lambda: ArtifactRepo(time.time))
    users: UserRepo = field(default_factory=lambda: UserRepo(time.time))
    usage: UsageRepo = field(default_factory=lambda: UsageRepo(time.time))
    limits: LimitRepo = field(default_factory=lambda: LimitRepo(time.time))
    approval_rules: ApprovalRuleRepo = field(default_factory=lambda: ApprovalRuleRepo(time.time))
    webhooks: WebhookRepo = field(default_factory=lambda: WebhookRepo(time.time))


class Store:
    def __init__(self, db: Connector, *, now: Now = time.time, repos: Repos | None = None) -> None:
        """`now` stamps created_at/updated_at and default event times (pass clock.time).
        `repos` replaces the SQL repositories (storage.memory.memory_store passes its own)."""
        self.db = db
        if repos is None:
            repos = Repos(
                WorkerRepo(now),
                ApiTokenRepo(now),
                JobRepo(now),
                AuditRepo(now),
                artifacts=ArtifactRepo(now),
                users=UserRepo(now),
                usage=UsageRepo(now),
                limits=LimitRepo(now),
                approval_rules=ApprovalRuleRepo(now),
                webhooks=WebhookRepo(now),
            )
        # Artifact rows have their own facade (store_artifacts); their repo joins `atomically`.
        self.artifacts = ArtifactRecords(db, now, repos.artifacts)
        # Users and teams too (store_users), with what authentication reads kept.
        self.users = UserRecords(db, now, repos.users)
        # Usage read from attempts, and teams' budgets (store_usage).
        self.usage = UsageRecords(db, repos.usage)
        # Concurrency limits (store_limits): the scheduler's, kept by the fleet once read.
        self.limits = LimitRecords(db, repos.limits)
        self.approval_rules = ApprovalRuleRecords(db, repos.approval_rules)
        # Webhook subscriptions, the outbox and the delivery log (store_webhooks).
        self.webhooks = WebhookRecords(db, repos.webhooks)
        self.repos = repos
        self._workers = self.repos.workers
        self._api_tokens = self.repos.api_tokens
        self._jobs = self.repos.jobs
        self._audit = self.repos.audit
        db.on_rollback(self._audit.forget_chain_head)
        db.on_rollback(self.repos.metrics.forget_counts)
        self._now = now
        # Live API tokens by hash. Every API request authenticates, and a token changes
        # only through this Store (revoke, touch), so one read per token serves them all.
        self._live_api_tokens: dict[str, ApiTokenRow] = {}
        self._api_token_revocations = 0

    async def atomically(
        self, fn: Callable[[Repos], T], *, after_commit: Callable[[T], None] | None = None
    ) -> T:
        """Run `fn(repos)` on the DB thread as one write: all of it commits or none does.
        `after_commit(result)` then runs on the DB thread before the caller hears back
        (Database.write)."""
        return await self.db.write(partial(fn, self.repos), after_commit=after_commit)

    # --- workers ------------------------------------------------------------------------

    async def create_worker(
        self,
        worker_id: str,
        *,
        name: str,
        worker_type: str,
        state: str = WorkerState.CONNECTING,
        token_hash: str | None = None,
        **fields: Any,
    ) -> WorkerRow:
        create = self._workers.create
        return await self.db.write(
            partial(
                create,
                worker_id,
                name=name,
                worker_type=worker_type,
                state=state,
                token_hash=token_hash,
                **fields,
            )
        )

    async def get_worker(self, worker_id: str) -> WorkerRow | None:
        return await self.db.read(partial(self._workers.get, worker_id))

    async def list_workers(
        self,
        status: States | None = None,
        *,
        worker_type: str | None = None,
        is_local: bool | None = None,
    ) -> list[WorkerRow]:
        return await self.db.read(
            partial(self._workers.find, status, worker_type=worker_type, is_local=is_local)
        )

    async def update_worker(self, worker_id: str, **fields: Any) -> bool:
        return await self.db.write(partial(self._workers.update, worker_id, **fields))

    async def save_heartbeats(self, beats: Sequence[HeartbeatColumns]) -> int:
        return await self.db.write(partial(self._workers.save_heartbeats, beats))

    async def cas_worker_state(
        self, worker_id: str, expected: States, new: str, **changes: Any
    ) -> bool:
        return await self.db.write(
            partial(self._workers.cas_state, worker_id, expected, new, **changes)
        )

    async def delete_worker(self, worker_id: str) -> bool:
        return await self.db.write(partial(self._workers.delete, worker_id))

    async def set_worker_token(self, worker_id: str, token_hash: str) -> bool:
        return await self.db.write(partial(self._workers.set_token, worker_id, token_hash))

    async def worker_by_token_hash(self, token_hash: str) -> WorkerRow | None:
        return await self.db.read(partial(self._workers.by_token_hash, token_hash))

    async def list_worker_tokens(
        self, worker_id: str | None = None, *, include_revoked: bool = False
    ) -> list[WorkerTokenRow]:
        return await self.db.read(
            partial(self._workers.tokens, worker_id, include_revoked=include_revoked)
        )

    # --- API tokens ---------------------------------------------------------------------

    async def create_api_token(
        self, *, name: str, token_hash: str, permissions: Sequence[str], user_id: int | None = None
    ) -> ApiTokenRow:
        create = partial(
            self._api_tokens.create,
            name=name,
            token_hash=token_hash,
            permissions=permissions,
            user_id=user_id,
        )
        return await self.db.write(create)

    async def api_token_by_hash(self, token_hash: str) -> ApiTokenRow | None:
        """The non-revoked token with this hash; read once, then kept until revoked."""
        row = self._live_api_tokens.get(token_hash)
        if row is not None:
            return row
        revocations = self._api_token_revocations
        row = await self.db.read(partial(self._api_tokens.by_hash, token_hash))
        # A revocation that overlapped this read may have come after it: keep nothing.
        if row is not None and revocations == self._api_token_revocations:
            self._live_api_tokens[token_hash] = row
        return row

    async def list_api_tokens(self, *, include_revoked: bool = False) -> list[ApiTokenRow]:
        return await self.db.read(partial(self._api_tokens.find, include_revoked=include_revoked))

    async def revoke_api_token(self, token_id: int) -> bool:
        self._api_token_revocations += 1
        try:
            return await self.db.write(partial(self._api_tokens.revoke, token_id))
        finally:
            self._api_token_revocations += 1
            self._live_api_tokens = {
                token_hash: row
                for token_hash, row in self._live_api_tokens.items()
                if row.id != token_id
            }

    async def touch_api_token(self, token_id: int) -> bool:
        now = self._now()
        touched = await self.db.write(partial(self._api_tokens.touch, token_id, at=now))
        for token_hash, row in list(self._live_api_tokens.items()):
            if row.id == token_id:
                self._live_api_tokens[token_hash] = replace(row, last_used_at=now)
        return touched

    # --- jobs ---------------------------------------------------------------------------

    async def create_job(self, job_id: str, *, config: dict[str, Any], **fields: Any) -> JobRow:
        return await self.db.write(partial(self._jobs.create, job_id, config=config, **fields))

    async def get_job(self, job_id: str) -> JobRow | None:
        return await self.db.read(partial(self._jobs.get, job_id))

    async def list_jobs(
        self,
        *,
        state: States | None = None,
        worker_id: str | None = None,
        target: str | None = None,
        submitted_by: str | None = None,
        owner: JobOwner | None = None,
        visible_to: Viewer | None = None,
        order: JobOrder = "newest",
        limit: int = 100,
        offset: int = 0,
    ) -> list[JobRow]:
        query = partial(
            self._jobs.find,
            state=state,
            worker_id=worker_id,
            target=target,
            submitted_by=submitted_by,
            owner=owner,
            visible_to=visible_to,
            order=order,
            limit=limit,
            offset=offset,
        )
        return await self.db.read(query)

    async def count_jobs(
        self,
        *,
        state: States | None = None,
        worker_id: str | None = None,
        target: str | None = None,
        submitted_by: str | None = None,
        owner: JobOwner | None = None,
        visible_to: Viewer | None = None,
    ) -> int:
        query = partial(
            self._jobs.count,
            state=state,
            worker_id=worker_id,
            target=target,
            submitted_by=submitted_by,
            owner=owner,
            visible_to=visible_to,
        )
        return await self.db.read(query)

    async def job_counts(self) -> dict[str, int]:
        """How many jobs are in each state (states with none are absent)."""
        return await self.db.read(self._jobs.counts_by_state)

    async def nonterminal_jobs(self) -> list[JobRow]:
        return await self.db.read(self._jobs.nonterminal)

    async def update_job(self, job_id: str, **fields: Any) -> bool:
        return await self.db.write(partial(self._jobs.update, job_id, **fields))

    async def cas_job_state(self, job_id: str, expected: States, new: str, **changes: Any) -> bool:
        return await self.db.write(partial(self._jobs.cas_state, job_id, expected, new, **changes))

    # --- attempts, timeline, logs -------------------------------------------------------

    async def start_attempt(
        self, job_id: str, number: int, *, worker_id: str | None, dispatched_at: float | None = None
    ) -> JobAttemptRow:
        start = partial(
            self._jobs.start_attempt,
            job_id,
            number,
            worker_id=worker_id,
            dispatched_at=dispatched_at,
        )
        return await self.db.write(start)

    async def ack_attempt(
        self, job_id: str, number: int, *, started_at: float | None = None
    ) -> bool:
        return await self.db.write(
            partial(self._jobs.ack_attempt, job_id, number, started_at=started_at)
        )

    async def end_attempt(
        self,
        job_id: str,
        number: int,
        *,
        outcome: str,
        reason: str | None = None,
        ended_at: float | None = None,
        kind: str | None = None,
        signature: str | None = None,
    ) -> bool:
        end = partial(
            self._jobs.end_attempt,
            job_id,
            number,
            outcome=outcome,
            reason=reason,
            ended_at=ended_at,
            kind=kind,
            signature=signature,
        )
        return await self.db.write(end)

    async def list_attempts(self, job_id: str) -> list[JobAttemptRow]:
        return await self.db.read(partial(self._jobs.attempts, job_id))

    async def count_attempts_apart(self, job_ids: Collection[str]) -> dict[str, AttemptsApart]:
        return await self.db.read(partial(self._jobs.count_attempts_apart, job_ids))

    async def append_job_event(
        self,
        job_id: str,
        kind: str,
        *,
        worker_id: str | None = None,
        attempt: int | None = None,
        detail: dict[str, Any] | None = None,
        at: float | None = None,
    ) -> JobEventRow:
        append = partial(
            self._jobs.append_event,
            job_id,
            kind,
            worker_id=worker_id,
            attempt=attempt,
            detail=detail,
            at=at,
        )
        return await self.db.write(append)

    async def list_job_events(
        self, job_id: str, *, after_id: int = 0, limit: int = MAX_PAGE
    ) -> list[JobEventRow]:
        return await self.db.read(
            partial(self._jobs.events, job_id, after_id=after_id, limit=limit)
        )

    async def append_logs(self, job_id: str, attempt: int, lines: Iterable[LogLineLike]) -> int:
        batch = list(lines)  # materialise here: the iterable may not be thread-safe
        return await self.db.write(partial(self._jobs.append_logs, job_id, attempt, batch))

    async def append_logs_within_quota(
        self, job_id: str, attempt: int, lines: Iterable[LogLineLike], max_bytes: int
    ) -> LogAppend:
        """Store what fits in the attempt's log quota; count the rest (log_quota.py)."""
        batch = list(lines)
        append = partial(self._jobs.append_logs_within_quota, job_id, attempt, batch, max_bytes)
        return await self.db.write(append)

    async def read_logs(
        self, job_id: str, *, after_id: int = 0, limit: int = MAX_PAGE, attempt: int | None = None
    ) -> list[JobLogRow]:
        return await self.db.read(
            partial(self._jobs.read_logs, job_id, after_id=after_id, limit=limit, attempt=attempt)
        )

    async def append_metrics(
        self, job_id: str, attempt: int, step: int, values: dict[str, float], at: float
    ) -> bool:
        append = partial(self.repos.metrics.append, job_id, attempt, step, values, at)
        return await self.db.write(append)

    async def read_metrics(
        self, job_id: str, *, since: int = 0, limit: int = 10_000, attempt: int | None = None
    ) -> list[JobMetricRow]:
        read = partial(self.repos.metrics.read, job_id, since=since, limit=limit, attempt=attempt)
        return await self.db.read(read)

    # --- audit --------------------------------------------------------------------------

    async def append_audit(
        self,
        kind: str,
        *,
        actor: str | None = None,
        client_address: str | None = None,
        target: str | None = None,
        outcome: str = "ok",
        detail: dict[str, Any] | None = None,
        at: float | None = None,
    ) -> AuditEventRow:
        append = partial(
            self._audit.append,
            kind,
            actor=actor,
            client_address=client_address,
            target=target,
            outcome=outcome,
            detail=detail,
            at=at,
        )
        return await self.db.write(append)

    async def list_audit(
        self,
        *,
        kind: str | None = None,
        actor: str | None = None,
        target: str | None = None,
        outcome: str | None = None,
        since: float | None = None,
        until: float | None = None,
        newest_first: bool = True,
        limit: int = 100,
        offset: int = 0,
    ) -> list[AuditEventRow]:
        query = partial(
            self._audit.find,
            kind=kind,
            actor=actor,
            target=target,
            outcome=outcome,
            since=since,
            until=until,
            newest_first=newest_first,
            limit=limit,
            offset=offset,
        )
        return await self.db.read(query)

    async def verify_audit(self, *, batch_size: int = MAX_PAGE) -> tuple[bool, int | None]:
        """Walk the whole chain: (True, None) if intact, else (False, first bad event id).

        One read per batch, so writes keep flowing while a long chain is checked.
        """
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        after_id, prev_hash = 0, GENESIS_HASH
        while True:
            check = await self.db.read(
                partial(self._audit.check_chain, after_id, prev_hash, batch_size)
            )
            if check.first_bad_id is not None:
                return False, check.first_bad_id
            if check.checked < batch_size:
                return True, None
            after_id, prev_hash = check.last_id, check.last_hash
