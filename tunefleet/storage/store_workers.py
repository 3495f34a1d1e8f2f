"""Workers, their tokens, and API tokens. Synchronous: these run on the DB thread.

Tokens are stored only as hashes; the store never sees a clear token (callers hash).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

import peewee as pw

from tunefleet.fsm.worker import WorkerState
from tunefleet.storage.errors import AlreadyExists
from tunefleet.storage.models import ApiToken, Worker, WorkerToken, database_proxy
from tunefleet.storage.rows import (
    ApiTokenRow,
    WorkerRow,
    WorkerTokenRow,
    first_of,
    inserted,
    rows_of,
)
from tunefleet.storage.statements import insert_row, update_each, update_where
from tunefleet.storage.store_base import Now, checked_fields, state_set

# Columns only create and cas_state set.
WORKER_FIXED = ("id", "state", "created_at", "updated_at")


def new_worker_values(
    worker_id: str, name: str, worker_type: str, state: str, fields: Mapping[str, Any], now: float
) -> dict[str, Any]:
    """A new worker's columns; `fields` must name settable columns."""
    values = checked_fields(Worker, fields, forbidden=WORKER_FIXED)
    values.update(
        id=worker_id,
        name=name,
        worker_type=worker_type,
        state=str(state),  # a row holds plain strings, not WorkerState members
        created_at=now,
        updated_at=now,
    )
    return values


def worker_changes(fields: Mapping[str, Any], now: float) -> dict[str, Any]:
    """What an update or a compare-and-set writes besides the state: settable columns only."""
    values = checked_fields(Worker, fields, forbidden=WORKER_FIXED)
    values["updated_at"] = now
    return values


class HeartbeatColumns(Protocol):
    """What save_heartbeats reads from each item (a WorkerRecord has all of it)."""

    worker_id: str
    last_heartbeat_at: float | None
    last_seen_at: float | None
    gpu_utilization: list[float]
    vram_used_gb: list[float]


class WorkerRepo:
    def __init__(self, now: Now) -> None:
        self._now = now

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
        """Insert a worker (and its first token when `token_hash` is given)."""
        values = new_worker_values(worker_id, name, worker_type, state, fields, self._now())
        if Worker.select().where(Worker.id == worker_id).exists():
            raise AlreadyExists(f"worker {worker_id} already exists")
        stored = insert_row(Worker, values)
        if token_hash is not None:
            self.set_token(worker_id, token_hash)
        return inserted(WorkerRow, Worker, stored)

    def get(self, worker_id: str) -> WorkerRow | None:
        return first_of(WorkerRow, Worker.select().where(Worker.id == worker_id))

    def find(
        self,
        status: str | Collection[str] | None = None,
        *,
        worker_type: str | None = None,
        is_local: bool | None = None,
    ) -> list[WorkerRow]:
        """Workers in creation order, optionally only those in `status` (one or several)."""
        query = Worker.select()
        if status is not None:
            query = query.where(Worker.state.in_(state_set(status)))
        if worker_type is not None:
            query = query.where(Worker.worker_type == worker_type)
        if is_local is not None:
            query = query.where(Worker.is_local == is_local)
        query = query.order_by(Worker.created_at, Worker.id)
        return rows_of(WorkerRow, query)

    def update(self, worker_id: str, **fields: Any) -> bool:
        """Set fields other than state (use cas_state); False when the worker is unknown."""
        values = worker_changes(fields, self._now())
        return bool(update_where(Worker, values, equal={"id": worker_id}))

    def save_heartbeats(self, beats: Sequence[HeartbeatColumns]) -> int:
        """Many workers' heartbeat columns at once: one statement, built once and run
        for every row (a query built per row costs a large fleet more than the disk).
        Unknown workers are skipped; the number of rows updated is returned."""
        if not beats:
            return 0
        now = self._now()
        columns = (
            "last_heartbeat_at", "last_seen_at", "gpu_utilization", "vram_used_gb", "updated_at"
        )  # fmt: skip
        rows = [
            (b.last_heartbeat_at, b.last_seen_at, b.gpu_utilization, b.vram_used_gb, now,
             b.worker_id)
            for b in beats
        ]  # fmt: skip
        return update_each(Worker, columns, "id", rows)

    def cas_state(
        self, worker_id: str, expected: str | Collection[str], new: str, **changes: Any
    ) -> bool:
        """Move to `new` only if the state is still `expected`; True when it happened."""
        values = worker_changes(changes, self._now())
        values["state"] = new
        changed = update_where(
            Worker, values, equal={"id": worker_id}, one_of=("state", state_set(expected))
        )
        return bool(changed)

    def delete(self, worker_id: str) -> bool:
        """Delete a worker and (by cascade) its tokens; jobs keep their history."""
        return bool(Worker.delete().where(Worker.id == worker_id).execute())

    def set_token(self, worker_id: str, token_hash: str) -> bool:
        """Make `token_hash` the worker's only valid token, revoking the previous ones.

        False when the worker does not exist. AlreadyExists if the hash is in use.
        """
        if not Worker.select().where(Worker.id == worker_id).exists():
            return False
        now = self._now()
        WorkerToken.update(revoked_at=now).where(
            WorkerToken.worker == worker_id, WorkerToken.revoked_at.is_null()
        ).execute()
        try:
            with database_proxy.atomic():
                WorkerToken.insert(
                    worker=worker_id, token_hash=token_hash, created_at=now
                ).execute()
        except pw.IntegrityError:
            raise AlreadyExists("this worker token hash is already in use") from None
        return True

    def by_token_hash(self, token_hash: str) -> WorkerRow | None:
        """The worker a non-revoked token belongs to."""
        query = (
            Worker.select()
            .join(WorkerToken)
            .where(WorkerToken.token_hash == token_hash, WorkerToken.revoked_at.is_null())
        )
        return first_of(WorkerRow, query)

    def tokens(
        self, worker_id: str | None = None, *, include_revoked: bool = False
    ) -> list[WorkerTokenRow]:
        query = WorkerToken.select()
        if worker_id is not None:
            query = query.where(WorkerToken.worker == worker_id)
        if not include_revoked:
            query = query.where(WorkerToken.revoked_at.is_null())
        return rows_of(WorkerTokenRow, query.order_by(WorkerToken.id))


class ApiTokenRepo:
    def __init__(self, now: Now) -> None:
        self._now = now

    def create(
        self, *, name: str, token_hash: str, permissions: Sequence[str], user_id: int | None = None
    ) -> ApiTokenRow:
        values: dict[str, Any] = {
            "name": name,
            "token_hash": token_hash,
            "permissions": list(permissions),
            "created_at": self._now(),
            "user_id": user_id,
        }
        try:
            with database_proxy.atomic():
                stored = insert_row(ApiToken, values)
        except pw.IntegrityError:
            raise AlreadyExists("this API token hash is already in use") from None
        return inserted(ApiTokenRow, ApiToken, stored)

    def by_hash(self, token_hash: str) -> ApiTokenRow | None:
        """The non-revoked token with this hash."""
        query = ApiToken.select().where(
            ApiToken.token_hash == token_hash, ApiToken.revoked_at.is_null()
        )
        return first_of(ApiTokenRow, query)

    def find(self, *, include_revoked: bool = False) -> list[ApiTokenRow]:
        query = ApiToken.select()
        if not include_revoked:
            query = query.where(ApiToken.revoked_at.is_null())
        return rows_of(ApiTokenRow, query.order_by(ApiToken.id))

    def revoke(self, token_id: int) -> bool:
        """False when the token is unknown or already revoked."""
        query = ApiToken.update(revoked_at=self._now()).where(
            ApiToken.id == token_id, ApiToken.revoked_at.is_null()
        )
        return bool(query.execute())

    def touch(self, token_id: int, *, at: float | None = None) -> bool:
        """Record a use of an active token (at `at`, or now)."""
        query = ApiToken.update(last_used_at=self._now() if at is None else at).where(
            ApiToken.id == token_id, ApiToken.revoked_at.is_null()
        )
        return bool(query.execute())
