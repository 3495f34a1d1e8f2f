"""The in-memory database under storage/memory.py: the tables, all-or-nothing writes,
and rows stored as a database would store them."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Any, TypeVar

import peewee as pw

from tunefleet.actors.fair_share import TeamQuota
from tunefleet.storage.database import follow_up
from tunefleet.storage.errors import DatabaseClosed
from tunefleet.storage.rows import (
    ApiTokenRow,
    ApprovalRuleRow,
    AuditEventRow,
    JobAttemptRow,
    JobEventRow,
    JobLogRow,
    JobMetricRow,
    JobRow,
    TeamBudgetRow,
    TeamMemberRow,
    TeamRow,
    UserRow,
    WorkerRow,
    WorkerTokenRow,
    inserted,
)
from tunefleet.storage.store_artifacts import (
    ArtifactRow,
    CheckpointRow,
    MultipartRow,
    UploadTokenRow,
)

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Tables:
    """Every table as a dict by primary key (insertion order = id order), plus the next
    id of each auto-numbered one. Rows are frozen: an update stores a replaced row, so a
    snapshot needs only shallow copies of the dicts."""

    workers: dict[str, WorkerRow] = field(default_factory=dict)
    worker_tokens: dict[int, WorkerTokenRow] = field(default_factory=dict)
    api_tokens: dict[int, ApiTokenRow] = field(default_factory=dict)
    users: dict[int, UserRow] = field(default_factory=dict)
    teams: dict[int, TeamRow] = field(default_factory=dict)
    team_members: dict[int, TeamMemberRow] = field(default_factory=dict)
    team_budgets: dict[int, TeamBudgetRow] = field(default_factory=dict)
    approval_rules: dict[int, ApprovalRuleRow] = field(default_factory=dict)
    jobs: dict[str, JobRow] = field(default_factory=dict)
    attempts: dict[tuple[str, int], JobAttemptRow] = field(default_factory=dict)
    job_events: dict[int, JobEventRow] = field(default_factory=dict)
    job_logs: dict[int, JobLogRow] = field(default_factory=dict)
    job_metrics: dict[int, JobMetricRow] = field(default_factory=dict)
    audit_events: dict[int, AuditEventRow] = field(default_factory=dict)
    upload_tokens: dict[int, UploadTokenRow] = field(default_factory=dict)
    artifacts: dict[int, ArtifactRow] = field(default_factory=dict)
    checkpoints: dict[int, CheckpointRow] = field(default_factory=dict)
    multiparts: dict[str, MultipartRow] = field(default_factory=dict)
    # store_limits' twin: the fleet's setting row (key 1) and limits by team id.
    concurrency: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)
    team_limits: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)
    team_quotas: dict[str, TeamQuota] = field(default_factory=dict)  # by team name
    # store_webhooks' tables (memory_webhooks.py).
    webhook_subscriptions: dict[int, Any] = field(default_factory=dict)
    webhook_events: dict[int, Any] = field(default_factory=dict)
    webhook_deliveries: dict[int, Any] = field(default_factory=dict)
    webhook_attempts: dict[int, Any] = field(default_factory=dict)
    last_ids: dict[str, int] = field(default_factory=dict)

    def next_id(self, table: str) -> int:
        self.last_ids[table] = self.last_ids.get(table, 0) + 1
        return self.last_ids[table]

    def insert(
        self, table: str, cls: type[R], model: type[pw.Model], values: Mapping[str, Any]
    ) -> R:
        """An INSERT into auto-numbered `table` (a field's name): `values` stored under
        the table's next id, as stored_row says; returns the stored row."""
        row_id = self.next_id(table)
        row = getattr(self, table)[row_id] = stored_row(cls, model, {**values, "id": row_id})
        return row

    def snapshot(self) -> Tables:
        return Tables(**{f.name: dict(getattr(self, f.name)) for f in fields(self)})

    def restore(self, saved: Tables) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(saved, f.name))


class MemoryDatabase:
    """What ``Store`` needs of a ``Database`` (read, write, on_rollback, close), in memory."""

    def __init__(self) -> None:
        self.tables = Tables()
        self._rollback_listeners: list[Callable[[], None]] = []
        self._commit_listeners: list[Callable[[], None]] = []
        self._closing = False

    def on_rollback(self, forget: Callable[[], None]) -> None:
        self._rollback_listeners.append(forget)

    def on_commit(self, done: Callable[[], None]) -> None:
        self._commit_listeners.append(done)

    @property
    def closed(self) -> bool:
        return self._closing

    async def read(self, fn: Callable[[], T]) -> T:
        await self._turn()
        return fn()

    async def write(
        self, fn: Callable[[], T], *, after_commit: Callable[[T], None] | None = None
    ) -> T:
        """All of ``fn`` or none of it, like a savepoint of ``Database.write``; then
        ``after_commit(result)`` if it was kept, before the caller hears back."""
        await self._turn()
        saved = self.tables.snapshot()
        try:
            result = fn()
        except BaseException:
            self.tables.restore(saved)
            for forget in self._rollback_listeners:
                forget()
            raise
        if after_commit is not None:
            follow_up(partial(after_commit, result))
        for done in self._commit_listeners:
            follow_up(done)
        return result

    async def close(self) -> None:
        self._closing = True

    async def _turn(self) -> None:
        if self._closing:
            raise DatabaseClosed("the in-memory database is closed")
        # A real database answers later, from its own thread: let other tasks run first.
        await asyncio.sleep(0)


def stored_row(cls: type[R], model: type[pw.Model], values: Mapping[str, Any]) -> R:
    """The row an INSERT of ``values`` would store: the model's default for each field not
    given, each value through its field (``db_value``, then ``python_value``) as a
    database round trip would."""
    as_stored = {}
    for f in model._meta.sorted_fields:
        if f.name in values:
            value = values[f.name]
        else:
            value = f.default() if callable(f.default) else f.default
        as_stored[f.name] = f.db_value(value)
    return inserted(cls, model, as_stored)


def changed_row(row: R, model: type[pw.Model], changes: Mapping[str, Any]) -> R:
    """``row`` with ``changes`` (by field name) stored as an UPDATE would store them."""
    known = model._meta.fields
    values = {
        name: known[name].python_value(known[name].db_value(v)) for name, v in changes.items()
    }
    return replace(row, **values)  # type: ignore[type-var]


def fresh(row: R) -> R:
    """A copy a caller may not harm: rows are frozen, but their dicts and lists are not."""
    return copy.deepcopy(row)


def foreign_key_failed(table: str) -> pw.IntegrityError:
    """What the database raises for a row naming a job that does not exist."""
    return pw.IntegrityError(f"FOREIGN KEY constraint failed ({table}.job_id)")
