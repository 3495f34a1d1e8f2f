"""Live events for pages and followers (``/api/events``, job log follow).

Publishing never blocks an actor: each subscriber has a bounded queue, and a
subscriber that falls behind is dropped (it reconnects and reloads).
"""

from __future__ import annotations

import asyncio
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


class Subscription:
    __slots__ = ("kinds", "overflowed", "queue")

    def __init__(self, kinds: frozenset[str] | None, maxsize: int) -> None:
        self.kinds = kinds
        self.queue: asyncio.Queue[HubEvent] = asyncio.Queue(maxsize)
        self.overflowed = False


class EventHub:
    def __init__(self, queue_size: int = 1000) -> None:
        self._subscribers: set[Subscription] = set()
        self._seq = itertools.count(1)
        self._queue_size = queue_size

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

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)
