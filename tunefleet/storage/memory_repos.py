"""In-memory workers, tokens and jobs: the repositories of store_workers and store_jobs
over storage/memory.py's tables. Each method keeps its SQL twin's contract (same
arguments, same answers, same errors); tests/storage/test_storage_contract.py runs one
set of tests over both. Subclasses, so a Store takes them where it takes the SQL ones;
every public method is overridden (a contract test checks), so none reaches peewee.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from tunefleet.fsm.job import TERMINAL_JOB_STATES
from tunefleet.fsm.worker import WorkerState
from tunefleet.storage.errors import AlreadyExists
from tunefleet.storage.log_quota import LogAppend, quota_marker, split_at_quota
from tunefleet.storage.memory_tables import (
    Tables,
    changed_row,
    foreign_key_failed,
    fresh,
    stored_row,
)
from tunefleet.storage.models import (
    ApiToken,
    Job,
    JobAttempt,
    JobEvent,
    JobLog,
    Worker,
    WorkerToken,
)
from tunefleet.storage.rows import (
    ApiTokenRow,
    AttemptsApart,
    JobAttemptRow,
    JobEventRow,
    JobLogRow,
    JobRow,
    WorkerRow,
    WorkerTokenRow,
    attempts_apart,
)
from tunefleet.storage.store_base import MAX_PAGE, JobOwner, Now, Viewer, page, state_set
from tunefleet.storage.store_jobs import (
    JobOrder,
    JobRepo,
    LogLineLike,
    attempt_values,
    event_values,
    job_changes,
    log_values,
    new_job_values,
)
from tunefleet.storage.store_workers import (
    ApiTokenRepo,
    HeartbeatColumns,
    WorkerRepo,
    new_worker_values,
    worker_changes,
)


class MemoryWorkerRepo(WorkerRepo):
    def __init__(self, now: Now, tables: Tables) -> None:
        self._now = now
        self._t = tables

    def create(
        self,
        worker_id: str,
        *,
        name: str,
        worker_type: str,
        state: str = WorkerState.CONNECTING,
        token_hash: str | None = None,
        **fields: Any,
    ) -> WorkerRow:
        values = new_worker_values(worker_id, name, worker_type, state, fields, self._now())
        if worker_id in self._t.workers:
            raise AlreadyExists(f"worker {worker_id} already exists")
        row = self._t.workers[worker_id] = stored_row(WorkerRow, Worker, values)
        if token_hash is not None:
            self.set_token(worker_id, token_hash)
        return fresh(row)

    def get(self, worker_id: str) -> WorkerRow | None:
        row = self._t.workers.get(worker_id)
        return fresh(row) if row is not None else None

    def find(
        self,
        status: str | Collection[str] | None = None,
        *,
        worker_type: str | None = None,
        is_local: bool | None = None,
    ) -> list[WorkerRow]:
        states = state_set(status) if status is not None else None
        found = [
            row
            for row in self._t.workers.values()
            if (states is None or row.state in states)
            and (worker_type is None or row.worker_type == worker_type)
            and (is_local is None or row.is_local == is_local)
        ]
        return [fresh(row) for row in sorted(found, key=lambda r: (r.created_at, r.id))]

    def update(self, worker_id: str, **fields: Any) -> bool:
        return self._change(worker_id, worker_changes(fields, self._now()))

    def save_heartbeats(self, beats: Sequence[HeartbeatColumns]) -> int:
        now = self._now()
        saved = 0
        for b in beats:
            saved += self._change(
                b.worker_id,
                {
                    "last_heartbeat_at": b.last_heartbeat_at,
                    "last_seen_at": b.last_seen_at,
                    "gpu_utilization": b.gpu_utilization,
                    "vram_used_gb": b.vram_used_gb,
                    "updated_at": now,
                },
            )
        return saved

    def cas_state(
        self, worker_id: str, expected: str | Collection[str], new: str, **changes: Any
    ) -> bool:
        values = worker_changes(changes, self._now())
        row = self._t.workers.get(worker_id)
        if row is None or row.state not in state_set(expected):
            return False
        values["state"] = str(new)  # plain, as a database gives it back
        return self._change(worker_id, values)

    def delete(self, worker_id: str) -> bool:
        if self._t.workers.pop(worker_id, None) is None:
            return False
        tokens = self._t.worker_tokens
        for token_id in [i for i, t in tokens.items() if t.worker_id == worker_id]:
            del tokens[token_id]  # the foreign key's cascade
        return True

    def set_token(self, worker_id: str, token_hash: str) -> bool:
        if worker_id not in self._t.workers:
            return False
        now = self._now()
        tokens = self._t.worker_tokens
        for token_id, token in list(tokens.items()):
            if token.worker_id == worker_id and token.revoked_at is None:
                tokens[token_id] = changed_row(token, WorkerToken, {"revoked_at": now})
        if any(t.token_hash == token_hash for t in tokens.values()):
            raise AlreadyExists("this worker token hash is already in use")
        values = {"worker": worker_id, "token_hash": token_hash, "created_at": now}
        self._t.insert("worker_tokens", WorkerTokenRow, WorkerToken, values)
        return True

    def by_token_hash(self, token_hash: str) -> WorkerRow | None:
        for token in self._t.worker_tokens.values():
            if token.token_hash == token_hash and token.revoked_at is None:
                return self.get(token.worker_id)
        return None

    def tokens(
        self, worker_id: str | None = None, *, include_revoked: bool = False
    ) -> list[WorkerTokenRow]:
        return [
            fresh(t)
            for t in self._t.worker_tokens.values()
            if (worker_id is None or t.worker_id == worker_id)
            and (include_revoked or t.revoked_at is None)
        ]

    def _change(self, worker_id: str, values: dict[str, Any]) -> bool:
        row = self._t.workers.get(worker_id)
        if row is None:
            return False
        self._t.workers[worker_id] = changed_row(row, Worker, values)
        return True


class MemoryApiTokenRepo(ApiTokenRepo):
    def __init__(self, now: Now, tables: Tables) -> None:
        self._now = now
        self._t = tables

    def create(
        self, *, name: str, token_hash: str, permissions: Sequence[str], user_id: int | None = None
    ) -> ApiTokenRow:
        if any(t.token_hash == token_hash for t in self._t.api_tokens.values()):
            raise AlreadyExists("this API token hash is already in use")
        values = {
            "name": name,
            "token_hash": token_hash,
            "permissions": list(permissions),
            "created_at": self._now(),
            "user_id": user_id,
        }
        return fresh(self._t.insert("api_tokens", ApiTokenRow, ApiToken, values))

    def by_hash(self, token_hash: str) -> ApiTokenRow | None:
        for token in self._t.api_tokens.values():
            if token.token_hash == token_hash and token.revoked_at is None:
                return fresh(token)
        return None

    def find(self, *, include_revoked: bool = False) -> list[ApiTokenRow]:
        return [
            fresh(t) for t in self._t.api_tokens.values() if include_revoked or t.revoked_at is None
        ]

    def revoke(self, token_id: int) -> bool:
        return self._change_active(token_id, {"revoked_at": self._now()})

    def touch(self, token_id: int, *, at: float | None = None) -> bool:
        return self._change_active(token_id, {"last_used_at": self._now() if at is None else at})

    def _change_active(self, token_id: int, values: dict[str, Any]) -> bool:
        token = self._t.api_tokens.get(token_id)
        if token is None or token.revoked_at is not None:
            return False
        self._t.api_tokens[token_id] = changed_row(token, ApiToken, values)
        return True


class MemoryJobRepo(JobRepo):
    def __init__(self, now: Now, tables: Tables) -> None:
        self._now = now
        self._t = tables

    # --- jobs ---------------------------------------------------------------------------

    def create(self, job_id: str, *, config: dict[str, Any], **fields: Any) -> JobRow:
        values = new_job_values(job_id, config, fields, self._now())
        if job_id in self._t.jobs:
            raise AlreadyExists(f"job {job_id} already exists")
        values["seq"] = max((job.seq for job in self._t.jobs.values()), default=0) + 1
        row = self._t.jobs[job_id] = stored_row(JobRow, Job, values)
        return fresh(row)

    def insert(self, job_id: str, *, config: dict[str, Any], **fields: Any) -> int:
        return self.create(job_id, config=config, **fields).seq

    def get(self, job_id: str) -> JobRow | None:
        row = self._t.jobs.get(job_id)
        return fresh(row) if row is not None else None

    def find(
        self,
        *,
        state: str | Collection[str] | None = None,
        worker_id: str | None = None,
        target: str | None = None,
        submitted_by: str | None = None,
        owner: JobOwner | None = None,
        visible_to: Viewer | None = None,
        order: JobOrder = "newest",
        limit: int = 100,
        offset: int = 0,
    ) -> list[JobRow]:
        limit, offset = page(limit, offset)
        found = self._matching(state, worker_id, target, submitted_by, owner, visible_to)
        found.sort(key=lambda r: r.seq, reverse=order == "newest")
        return [fresh(row) for row in found[offset : offset + limit]]

    def count(
        self,
        *,
        state: str | Collection[str] | None = None,
        worker_id: str | None = None,
        target: str | None = None,
        submitted_by: str | None = None,
        owner: JobOwner | None = None,
        visible_to: Viewer | None = None,
    ) -> int:
        return len(self._matching(state, worker_id, target, submitted_by, owner, visible_to))

    def counts_by_state(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self._t.jobs.values():
            counts[row.state] = counts.get(row.state, 0) + 1
        return counts

    def nonterminal(self) -> list[JobRow]:
        live = [row for row in self._t.jobs.values() if row.state not in TERMINAL_JOB_STATES]
        return [fresh(row) for row in sorted(live, key=lambda r: r.seq)]

    def update(self, job_id: str, **fields: Any) -> bool:
        values = job_changes(fields, self._now())
        row = self._t.jobs.get(job_id)
        if row is None:
            return False
        self._t.jobs[job_id] = changed_row(row, Job, values)
        return True

    def cas_state(
        self, job_id: str, expected: str | Collection[str], new: str, **changes: Any
    ) -> bool:
        values = job_changes(changes, self._now())
        row = self._t.jobs.get(job_id)
        if row is None or row.state not in state_set(expected):
            return False
        values["state"] = str(new)  # plain, as a database gives it back
        self._t.jobs[job_id] = changed_row(row, Job, values)
        return True

    def _matching(
        self,
        state: str | Collection[str] | None,
        worker_id: str | None,
        target: str | None,
        submitted_by: str | None,
        owner: JobOwner | None = None,
        visible_to: Viewer | None = None,
    ) -> list[JobRow]:
        states = state_set(state) if state is not None else None
        return [
            row
            for row in self._t.jobs.values()
            if (states is None or row.state in states)
            and (worker_id is None or row.worker_id == worker_id)
            and (target is None or row.target == target)
            and (submitted_by is None or row.submitted_by == submitted_by)
            and (owner is None or _owned_by(row, owner))
            and (visible_to is None or _seen_by(row, visible_to))
        ]

    # --- attempts -----------------------------------------------------------------------

    def start_attempt(
        self, job_id: str, number: int, *, worker_id: str | None, dispatched_at: float | None = None
    ) -> JobAttemptRow:
        if job_id not in self._t.jobs:
            raise foreign_key_failed("job_attempt")
        if (job_id, number) in self._t.attempts:
            raise AlreadyExists(f"job {job_id} attempt {number} already exists")
        when = self._now() if dispatched_at is None else dispatched_at
        values = {
            **attempt_values(job_id, number, worker_id, when),
            "id": self._t.next_id("attempts"),
        }
        row = self._t.attempts[(job_id, number)] = stored_row(JobAttemptRow, JobAttempt, values)
        return fresh(row)

    def insert_attempt(
        self, job_id: str, number: int, *, worker_id: str | None, dispatched_at: float | None = None
    ) -> None:
        self.start_attempt(job_id, number, worker_id=worker_id, dispatched_at=dispatched_at)

    def ack_attempt(self, job_id: str, number: int, *, started_at: float | None = None) -> bool:
        row = self._t.attempts.get((job_id, number))
        if row is None or row.started_at is not None or row.ended_at is not None:
            return False
        when = self._now() if started_at is None else started_at
        self._t.attempts[(job_id, number)] = changed_row(row, JobAttempt, {"started_at": when})
        return True

    def end_attempt(
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
        row = self._t.attempts.get((job_id, number))
        if row is None or row.ended_at is not None:
            return False
        values = {
            "outcome": outcome,
            "reason": reason,
            "ended_at": self._now() if ended_at is None else ended_at,
            "kind": kind,
            "signature": signature,
        }
        self._t.attempts[(job_id, number)] = changed_row(row, JobAttempt, values)
        return True

    def attempts(self, job_id: str) -> list[JobAttemptRow]:
        found = [row for (job, _), row in self._t.attempts.items() if job == job_id]
        return [fresh(row) for row in sorted(found, key=lambda r: r.number)]

    def count_attempts_apart(self, job_ids: Collection[str]) -> dict[str, AttemptsApart]:
        wanted = set(job_ids)
        return attempts_apart(
            (job, row.outcome, row.kind, 1)
            for (job, _), row in self._t.attempts.items()
            if job in wanted
        )

    # --- timeline -----------------------------------------------------------------------

    def append_event(
        self,
        job_id: str,
        kind: str,
        *,
        worker_id: str | None = None,
        attempt: int | None = None,
        detail: dict[str, Any] | None = None,
        at: float | None = None,
    ) -> JobEventRow:
        if job_id not in self._t.jobs:
            raise foreign_key_failed("job_event")
        when = self._now() if at is None else at
        values = event_values(job_id, kind, worker_id, attempt, detail, when)
        return fresh(self._t.insert("job_events", JobEventRow, JobEvent, values))

    def insert_event(
        self,
        job_id: str,
        kind: str,
        *,
        worker_id: str | None = None,
        attempt: int | None = None,
        detail: dict[str, Any] | None = None,
        at: float | None = None,
    ) -> None:
        self.append_event(job_id, kind, worker_id=worker_id, attempt=attempt, detail=detail, at=at)

    def events(self, job_id: str, *, after_id: int = 0, limit: int = MAX_PAGE) -> list[JobEventRow]:
        limit, _ = page(limit, 0)
        found = [e for e in self._t.job_events.values() if e.job_id == job_id and e.id > after_id]
        return [fresh(row) for row in found[:limit]]

    # --- logs ---------------------------------------------------------------------------

    def append_logs(self, job_id: str, attempt: int, lines: Iterable[LogLineLike]) -> int:
        if job_id not in self._t.jobs:
            raise foreign_key_failed("job_log")
        logs = self._t.job_logs
        have = {(row.attempt, row.seq) for row in logs.values() if row.job_id == job_id}
        added = 0
        for line in lines:
            if (attempt, line.seq) in have:
                continue  # the unique (job, attempt, seq) index: a retried batch is harmless
            have.add((attempt, line.seq))
            self._t.insert("job_logs", JobLogRow, JobLog, log_values(job_id, attempt, line))
            added += 1
        return added

    def append_logs_within_quota(
        self, job_id: str, attempt: int, lines: Sequence[LogLineLike], max_bytes: int
    ) -> LogAppend:
        row = self._t.attempts.get((job_id, attempt))
        if row is None:
            return LogAppend(self.append_logs(job_id, attempt, lines))
        dropped_before = row.log_lines_dropped
        stored_seqs = (
            set()
            if dropped_before
            else {
                r.seq
                for r in self._t.job_logs.values()
                if r.job_id == job_id and r.attempt == attempt
            }
        )
        split = split_at_quota(lines, stored_seqs, row.log_bytes, dropped_before > 0, max_bytes)
        stored = self.append_logs(job_id, attempt, split.kept)
        marker = False
        if split.first_dropped_at is not None and not dropped_before:
            line = quota_marker(max_bytes, split.first_dropped_at)
            marker = self.append_logs(job_id, attempt, [line]) == 1
        if split.kept_bytes or split.dropped:
            counters = {
                "log_bytes": row.log_bytes + split.kept_bytes,
                "log_lines_dropped": dropped_before + split.dropped,
            }
            self._t.attempts[(job_id, attempt)] = changed_row(row, JobAttempt, counters)
        return LogAppend(stored, split.dropped, marker, bool(split.dropped or dropped_before))

    def read_logs(
        self,
        job_id: str,
        *,
        after_id: int = 0,
        limit: int = MAX_PAGE,
        attempt: int | None = None,
    ) -> list[JobLogRow]:
        limit, _ = page(limit, 0)
        found = [
            row
            for row in self._t.job_logs.values()
            if row.job_id == job_id
            and row.id > after_id
            and (attempt is None or row.attempt == attempt)
        ]
        return [fresh(row) for row in found[:limit]]


def _owned_by(row: JobRow, owner: JobOwner) -> bool:
    return (owner.user_name is None or row.user_name == owner.user_name) and (
        owner.team_name is None or row.team_name == owner.team_name
    )


def _seen_by(row: JobRow, viewer: Viewer) -> bool:
    return row.user_name == viewer.user_name or row.team_name in viewer.team_names
