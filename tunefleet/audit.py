"""The audit log: every registration, dispatch, status change, token and admin action.

Each event is written twice: to the store's hash-chained, queryable table, and as a
JSON line appended to ``<data_dir>/audit.jsonl`` (which also catches a truncated
table). A line is written only for an event stored in the chain: one the database
refuses is held and stored later (audit_held), never written to the file alone.
Secrets never land in either: a detail key named like a secret is refused,
and token-looking text anywhere is masked.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import queue
import threading
import weakref
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from pathlib import Path
from typing import IO, Any, Protocol

import structlog

from tunefleet.audit_held import RETRY_S, AuditNotStored, HeldEvents
from tunefleet.logging import contains_token, is_secret_key, redact, redact_text

log = structlog.get_logger(__name__)

FILE_NAME = "audit.jsonl"

# What json.dumps(default=str, ensure_ascii=False) makes, from one encoder built once:
# json.dumps builds a new encoder on every call that passes options.
_LINE_ENCODER = json.JSONEncoder(default=str, ensure_ascii=False)


def _encode_line(fields: dict[str, Any]) -> str:
    """``_LINE_ENCODER.encode(fields)``, calling the C encoder it would build directly:
    its Python set-up (a closure, option lookups) cost a fifth of a line. A new markers
    dict each call, so a circular value is still refused."""
    if c_make_encoder is None:  # a Python without the json accelerator
        return _LINE_ENCODER.encode(fields)
    encode = c_make_encoder({}, str, encode_basestring, None, ": ", ", ", False, False, True)
    return "".join(encode(fields, 0))


class AuditKind(StrEnum):
    WORKER_REGISTER = "worker.register"
    WORKER_REGISTER_FAILED = "worker.register_failed"
    WORKER_CREATED = "worker.created"
    WORKER_DELETED = "worker.deleted"
    WORKER_DRAINED = "worker.drained"
    WORKER_RESUMED = "worker.resumed"
    # A bad machine takes no new job: automatically (actor "orchestrator") or by hand.
    WORKER_QUARANTINED = "worker.quarantined"
    WORKER_RELEASED = "worker.released"
    WORKER_TOKEN_ROTATED = "worker.token_rotated"
    WORKER_DISCONNECTED = "worker.disconnected"
    WORKER_OFFLINE = "worker.offline"
    # Its GPUs' health moved to another level (healthy, degraded, unhealthy).
    WORKER_HEALTH = "worker.health"
    JOB_SUBMITTED = "job.submitted"
    JOB_DISPATCHED = "job.dispatched"
    JOB_STATUS = "job.status"
    JOB_REQUEUED = "job.requeued"
    JOB_CANCELLED = "job.cancelled"
    # A preemption asked for (who, why, which attempt); its end is a job.requeued.
    JOB_PREEMPTED = "job.preempted"
    JOB_APPROVED = "job.approved"
    JOB_REJECTED = "job.rejected"
    JOB_FAILED = "job.failed"
    JOB_COMPLETED = "job.completed"
    AUTH_FAILED = "auth.failed"
    # One address's failed sign-ins over one window, after its first (auth_throttle).
    AUTH_FAILED_WINDOW = "auth.failed_window"
    API_TOKEN_CREATED = "api_token.created"
    API_TOKEN_REVOKED = "api_token.revoked"
    ARTIFACT_UPLOADED = "artifact.uploaded"
    ARTIFACT_DOWNLOADED = "artifact.downloaded"
    ARTIFACTS_DELETED = "artifacts.deleted"
    USER_CREATED = "user.created"
    APPROVAL_RULE_ADDED = "approval_rule.added"
    APPROVAL_RULE_DELETED = "approval_rule.deleted"
    USER_DISABLED = "user.disabled"
    USER_ENABLED = "user.enabled"
    USER_ROLE_SET = "user.role_set"
    # People signing in to the web UI with a password (issue 24).
    USER_PASSWORD_SET = "user.password_set"
    USER_SIGNED_IN = "user.signed_in"
    USER_SIGNED_OUT = "user.signed_out"
    TEAM_CREATED = "team.created"
    TEAM_MEMBER_ADDED = "team.member_added"
    TEAM_MEMBER_REMOVED = "team.member_removed"
    TEAM_BUDGET_SET = "team.budget_set"
    TEAM_BUDGET_CLEARED = "team.budget_cleared"
    # A submit let through past its team's spent `warn` budget.
    BUDGET_WARNING = "budget.warning"
    TEAM_LIMITS_SET = "team.limits_set"
    QUEUE_CONCURRENCY_SET = "queue.concurrency_set"
    TEAM_QUOTA_SET = "team.quota_set"
    TEAM_QUOTA_CLEARED = "team.quota_cleared"
    QUEUE_RECLAIM = "queue.reclaim"
    # Webhook subscriptions (issue 27): the URL and events, never the secret.
    WEBHOOK_CREATED = "webhook.created"
    WEBHOOK_DELETED = "webhook.deleted"
    WEBHOOK_ENABLED = "webhook.enabled"
    WEBHOOK_SECRET_ROTATED = "webhook.secret_rotated"
    WEBHOOK_REDELIVERED = "webhook.redelivered"


_KINDS = frozenset(kind.value for kind in AuditKind)


class AuditAppend(Protocol):
    """The durable half: ``Store.append_audit``. Returns the stored record."""

    def __call__(
        self,
        kind: str,
        *,
        actor: str | None,
        client_address: str | None,
        target: str | None,
        outcome: str,
        detail: dict[str, Any],
        at: float,
    ) -> Awaitable[Any]: ...


class WallClock(Protocol):
    def time(self) -> float: ...


class AuditLog:
    """Records audit events; ``await close()`` at shutdown flushes and closes the file."""

    def __init__(
        self,
        store_append: AuditAppend,
        path: Path,
        clock: WallClock,
        *,
        held_retry_s: float = RETRY_S,
    ) -> None:
        self.path = path
        self._store_append = store_append
        self._clock = clock
        # One thread, FIFO: lines land in the order they were recorded, and the
        # event loop never waits on the disk. A queue and a thread of its own, not an
        # executor: a batch's hand-off is one put, its answer one call_soon_threadsafe.
        # (The lines of events stored with a job's change are written by the database
        # thread instead, right after their commit: stage_committed, write_staged.)
        self._batches: queue.SimpleQueue[_Written | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._file: IO[str] | None = None
        # The file is appended from two threads: the writer's, and the database's for
        # the lines of events stored with a change (stage_committed, write_staged).
        self._file_lock = threading.Lock()
        self._staged: list[str] = []
        self._staged_kinds: list[str] = []
        self._batch: _LineBatch | None = None
        self._closed = False
        self._held = HeldEvents(self._store_entry, self.recorded, retry_s=held_retry_s)

    async def record(
        self,
        kind: str,
        *,
        actor: str | None,
        outcome: str = "success",
        target: str | None = None,
        client_address: str | None = None,
        serve_anyway: bool = False,
        **detail: Any,
    ) -> Any:
        """Store the event, append its line, and return the stored record.

        Raises ValueError for an unknown kind or a detail key named like a secret
        (``token``, ``password``, ``secret``…): pass hashes or ids instead.
        If the database refuses the event, it is held and stored later, in order
        (audit_held), and AuditNotStored (507 for a full disk, else 503) is raised; with
        ``serve_anyway`` (a download, a refusal: answered however the audit fares) None
        is returned instead once it is held. A failing file write is logged, not raised,
        since the stored, hash-chained record is the authoritative copy.
        """
        event = self.entry(
            kind,
            actor=actor,
            outcome=outcome,
            target=target,
            client_address=client_address,
            **detail,
        )
        refused = await self._held.store_held()  # the older events go first
        if refused is None:
            try:
                stored = await self._store_entry(event)
            except Exception as error:
                refused = error
            else:
                await self.recorded(event, stored)
                return stored
        held = self._held.hold(event, event.kind, refused)
        if held and serve_anyway:
            return None
        raise AuditNotStored(event.kind, refused, held=held) from refused

    @property
    def held(self) -> int:
        """Events the database refused, held to be stored once it takes writes again."""
        return len(self._held)

    async def store_held(self) -> bool:
        """Store the held events now (they are also tried every second); True when none
        is left."""
        return await self._held.store_held() is None

    async def _store_entry(self, event: AuditEntry) -> Any:
        return await self._store_append(event.kind, at=event.at, **event.fields)

    def entry(
        self,
        kind: str,
        *,
        actor: str | None,
        outcome: str = "success",
        target: str | None = None,
        client_address: str | None = None,
        **detail: Any,
    ) -> AuditEntry:
        """An event checked and scrubbed as ``record`` does, for the caller to store in
        the transaction of the change it describes (``AuditRepo.append(**entry.row())``,
        or ``add`` for only its id and hash), then to hand to ``recorded`` (or
        ``stage_committed``): one commit for the change and its audit event."""
        if self._closed:
            raise RuntimeError("the audit log is closed")
        if kind not in _KINDS:
            raise ValueError(f"unknown audit event kind {kind!r}; add it to AuditKind")
        secret_keys = sorted(key for key in detail if is_secret_key(key))
        if secret_keys:
            raise ValueError(
                f"audit event {kind} has secret-named detail {secret_keys}; "
                "never audit a secret, record its id or hash"
            )
        fields: dict[str, Any] = {
            "actor": _scrub_text(actor),
            "client_address": _scrub_text(client_address),
            "target": _scrub_text(target),
            "outcome": redact_text(outcome),
            "detail": _scrub_detail(kind, detail),
        }
        return AuditEntry(str(kind), self._clock.time(), fields)

    async def recorded(self, event: AuditEntry, stored: Any) -> None:
        """Append the line of an event now stored (``stored`` is its stored record)."""
        await self._append_line(_line_fields(event, stored=stored))

    def stage_committed(self, events: Iterable[tuple[AuditEntry, Any]]) -> None:
        """The lines of events whose transaction has just committed, each with its stored
        record, kept for ``write_staged``. Both run on the thread that committed it (the
        database's: a write's ``after_commit`` and the database's ``on_commit``, wired by
        Persistence), so a job's lines need no hand-off to the writer thread and back and
        are on file before the change's caller hears that it is stored."""
        for event, stored in events:
            self._staged.append(_encode_line(_line_fields(event, stored=stored)))
            self._staged_kinds.append(event.kind)

    def write_staged(self) -> None:
        """Append the staged lines: one write and one flush for a whole write group's.
        A failing write is logged, as on the writer thread."""
        if not self._staged:
            return
        lines, kinds = self._staged, self._staged_kinds
        self._staged, self._staged_kinds = [], []
        try:
            self._write_lines(lines)
        except Exception as error:
            log.error("audit line not written", path=str(self.path), kinds=kinds, error=str(error))
        if self._closed:  # committed while the log closed: the file is not left open
            self._close_file()

    async def close(self) -> None:
        """Write what is queued, then close the file. Safe to call twice."""
        if self._closed:
            return
        await self._held.close()  # a last try; what remains is logged, loudly
        self._closed = True
        self._flush()  # lines queued behind the last record go before the file closes
        writer = self._writer
        if writer is not None:
            self._batches.put(None)
            await asyncio.to_thread(writer.join)
        await asyncio.to_thread(self._close_file)

    # --- the file (on the writer thread) ------------------------------------------

    async def _append_line(self, fields: dict[str, Any]) -> None:
        # Lines recorded in the same turn of the event loop go to the writer thread
        # together: one hand-off per batch, not one per line, under load.
        batch = self._batch
        if batch is None:
            loop = asyncio.get_running_loop()
            batch = self._batch = _LineBatch(loop.create_future())
            loop.call_soon(self._flush)
        batch.lines.append(_encode_line(fields))
        batch.kinds.append(str(fields["kind"]))
        # Shielded: a cancelled caller must not cancel the other callers' shared wait.
        await asyncio.shield(batch.written)

    def _flush(self) -> None:
        batch, self._batch = self._batch, None
        if batch is None:
            return
        if self._writer is None:
            self._writer = _start_writer(self)
        self._batches.put(_Written(batch, asyncio.get_running_loop()))

    def _written(self, batch: _LineBatch, error: BaseException | None) -> None:
        if error is not None:
            log.error(
                "audit line not written", path=str(self.path), kinds=batch.kinds, error=str(error)
            )
        if not batch.written.done():
            batch.written.set_result(None)

    def _write_lines(self, lines: list[str]) -> None:
        # One write and one flush for the batch: the lines are whole, in order.
        self._write("\n".join(lines))

    def _write(self, text: str) -> None:
        with self._file_lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(text + "\n")
            self._file.flush()

    def _write_batches(self) -> None:
        """The writer thread: each batch written in turn, its callers woken on their loop."""
        while (item := self._batches.get()) is not None:
            error: BaseException | None = None
            try:
                self._write_lines(item.batch.lines)
            except Exception as failure:
                error = failure
            # A closed loop raises RuntimeError: nobody is waiting there any more.
            with contextlib.suppress(RuntimeError):
                item.loop.call_soon_threadsafe(self._written, item.batch, error)

    def _close_file(self) -> None:
        with self._file_lock:
            if self._file is not None:
                self._file.close()
                self._file = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One checked, scrubbed audit event, not yet stored."""

    kind: str
    at: float
    fields: dict[str, Any]  # actor, client_address, target, outcome, detail

    def row(self) -> dict[str, Any]:
        """The keyword arguments of ``AuditRepo.append`` that store it."""
        return {"kind": self.kind, "at": self.at, **self.fields}


@dataclass(frozen=True, slots=True)
class _Written:
    """A batch handed to the writer thread, and the loop its callers wait on."""

    batch: _LineBatch
    loop: asyncio.AbstractEventLoop


def _start_writer(audit: AuditLog) -> threading.Thread:
    """The writer thread, started with the first line. A daemon, so a log never closed
    cannot hold the process at exit; the finalizer writes what is queued first (at exit,
    or when the log is dropped unclosed)."""
    writer = threading.Thread(target=audit._write_batches, name="tunefleet-audit", daemon=True)
    writer.start()
    weakref.finalize(audit, _stop_writer, audit._batches, writer)
    return writer


def _stop_writer(batches: queue.SimpleQueue[_Written | None], writer: threading.Thread) -> None:
    if writer.is_alive():
        batches.put(None)
        writer.join(timeout=10)


@dataclass(slots=True)
class _LineBatch:
    """Lines waiting for the writer thread, and the future their callers await."""

    written: asyncio.Future[None]
    lines: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)


def _line_fields(event: AuditEntry, *, stored: Any) -> dict[str, Any]:
    """The JSON line: the stored id and hash, to check the table against."""
    timestamp = datetime.datetime.fromtimestamp(event.at, datetime.UTC).isoformat()
    head = {"timestamp": timestamp.replace("+00:00", "Z"), "at": event.at, "kind": event.kind}
    id_, hash_ = getattr(stored, "id", None), getattr(stored, "hash", None)
    return {**head, **event.fields, "id": id_, "hash": hash_}


def _scrub_text(value: str | None) -> str | None:
    return None if value is None else redact_text(str(value))


def _scrub_detail(kind: str, detail: dict[str, Any]) -> dict[str, Any]:
    """Mask tokens at any depth (and values under nested secret-named keys, which come
    from user data such as labels). The event is kept; the leak is worth a warning."""
    if contains_token(repr(detail)):
        log.warning("audit detail contained a token; masked it", kind=str(kind))
    return {key: redact(value) for key, value in detail.items()}
