"""Live events for pages and followers (``/api/events``, job log follow).

Publishing never blocks an actor: each subscriber has a bounded queue, and a
subscriber that falls behind is dropped (it reconnects and reloads).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class HubEvent:
    seq: int
    kind: str
    data: dict[str, Any]


CLOSING = "closing"
# Every kind the orchestrator publishes.
KINDS = frozenset({"worker", "worker_deleted", "job", "job_progress", "job_logs"})


class Subscription:
    __slots__ = ("closed", "kinds", "overflowed", "queue")

    def __init__(self, kinds: frozenset[str] | None, maxsize: int) -> None:
        self.kinds = kinds
        self.queue: asyncio.Queue[HubEvent] = asyncio.Queue(maxsize)
        self.overflowed = False
        self.closed = False

    @property
    def ended(self) -> bool:
        """Stop reading: it fell behind, the orchestrator is shutting down, or its reader's
        credential was revoked."""
        return self.overflowed or self.closed

    def close(self) -> None:
        """End it and wake its reader now, not a ping later."""
        self.closed = True
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(HubEvent(0, CLOSING, {}))


class EventHub:
    def __init__(self, queue_size: int = 1000) -> None:
        self._subscribers: set[Subscription] = set()
        self._seq = itertools.count(1)
        self._queue_size = queue_size

    def wants(self, kind: str) -> bool:
        """Whether an event of ``kind`` would reach anyone: publishers whose data costs
        something to build (a worker's snapshot) skip it when no page is listening."""
        if not self._subscribers:  # no page open: every heartbeat asks
            return False
        return any(sub.kinds is None or kind in sub.kinds for sub in self._subscribers)

    def publish(self, kind: str, **data: Any) -> None:
        if not self._subscribers:
            return
        event = HubEvent(next(self._seq), kind, data)
        for sub in list(self._subscribers):
            if sub.kinds is not None and kind not in sub.kinds:
                continue
            try:
                sub.queue.put_nowait(event)
            except asyncio.QueueFull:
                sub.overflowed = True
                self._subscribers.discard(sub)

    @contextmanager
    def subscribe(self, kinds: frozenset[str] | None = None) -> Iterator[Subscription]:
        sub = Subscription(kinds, self._queue_size)
        self._subscribers.add(sub)
        try:
            yield sub
        finally:
            self._subscribers.discard(sub)

    @staticmethod
    def known_kinds() -> frozenset[str]:
        return KINDS

    def close(self) -> None:
        """Shutting down: wake every reader so open streams end now, not a ping later."""
        for sub in list(self._subscribers):
            sub.close()
        self._subscribers.clear()

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)
