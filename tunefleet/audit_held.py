"""Audit events the database refused, held in memory until it takes them.

The rule (docs/operations.md, "When the disk fills"): an audit event is in the hash
chain, or the request that made it is answered with an error. Never a side file. An event
recorded after its change (an admin action, an upload, a download) describes something
that already happened, so it is not dropped either: it is held here, in order, and
stored in the chain with its own time as soon as the database takes writes again: tried
again every ``retry_s``, and before any newer event. At most ``limit`` are held; past
that the newest is refused outright (logged at error level with its fields). Events
still held when the log closes are logged the same way: loudly, never silently lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from tunefleet.errors import TunefleetError
from tunefleet.logging import redact_text
from tunefleet.storage.errors import is_disk_full

log = structlog.get_logger(__name__)

MAX_HELD_EVENTS = 1000
RETRY_S = 1.0


class AuditNotStored(TunefleetError):
    """The database refused an audit event: 507 when its disk is full, 503 otherwise."""

    def __init__(self, kind: str, error: BaseException, *, held: bool) -> None:
        full = is_disk_full(error)
        self.status = 507 if full else 503
        why = "the database's disk is full" if full else f"the database refused it ({error})"
        then = (
            "it is held and stored once the database takes writes again"
            if held
            else f"{MAX_HELD_EVENTS} events are already held, so this one was not kept"
        )
        fix = "free space on the database's disk" if full else "check the orchestrator's log"
        super().__init__(
            redact_text(f"the audit event {kind} could not be stored: {why}; {then}; {fix}")
        )


class HeldEvents:
    """The held events, and the task that stores them. ``store(event)`` puts one event in
    the chain (raising as the database does); ``on_stored(event, row)`` follows it."""

    def __init__(
        self,
        store: Callable[[Any], Awaitable[Any]],
        on_stored: Callable[[Any, Any], Awaitable[None]],
        *,
        limit: int = MAX_HELD_EVENTS,
        retry_s: float = RETRY_S,
    ) -> None:
        self._store = store
        self._on_stored = on_stored
        self._limit = limit
        self._retry_s = retry_s
        self._events: deque[Any] = deque()
        self._lock = asyncio.Lock()
        self._retrying: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._events)

    def hold(self, event: Any, kind: str, error: BaseException) -> bool:
        """Keep ``event`` for a later try; False when ``limit`` are already held."""
        if len(self._events) >= self._limit:
            log.error(
                "audit event not stored and not held: too many held",
                kind=kind,
                held=len(self._events),
                error=redact_text(str(error)),
                audit_event=event,
            )
            return False
        self._events.append(event)
        log.error(
            "audit event held: the database refused it",
            kind=kind,
            held=len(self._events),
            error=redact_text(str(error)),
        )
        if self._retrying is None or self._retrying.done():
            self._retrying = asyncio.get_running_loop().create_task(self._retry())
        return True

    async def store_held(self) -> Exception | None:
        """Store the held events, oldest first, until one is refused; None when none is
        left, else the database's refusal. One caller at a time, so none is stored twice."""
        if not self._events:
            return None
        async with self._lock:
            while self._events:
                event = self._events[0]
                try:
                    row = await self._store(event)
                except Exception as error:
                    log.debug("held audit events still refused", error=str(error))
                    return error
                self._events.popleft()
                await self._on_stored(event, row)
            log.info("held audit events stored")
            return None

    async def close(self) -> None:
        """A last try; what is still held is logged at error level, event by event."""
        if self._retrying is not None:
            self._retrying.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retrying
        await self.store_held()
        while self._events:
            log.error(
                "audit event never stored: the database refused it", audit_event=self._events[0]
            )
            self._events.popleft()

    async def _retry(self) -> None:
        while True:
            await asyncio.sleep(self._retry_s)
            if await self.store_held() is None:
                return
