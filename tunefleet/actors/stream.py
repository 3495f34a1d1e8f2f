"""A worker's SSE outbox and its open stream, as the worker actor keeps them.

The outbox holds events with increasing ids until they are acknowledged, so a
reconnecting agent gets what it missed (``Last-Event-ID``) and a job_submit the agent
never acknowledged is sent again. Pings are not kept.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from dataclasses import dataclass
from typing import Any

_connection_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class StreamEvent:
    event_id: int | None
    type: str
    data: dict[str, Any]
    job_id: str | None = None


class EventQueue:
    """A queue for one reader: what ``asyncio.Queue`` does here, at a fraction of the
    memory (one deque instead of four, no task for a timed wait), since every connected
    worker holds one for as long as its stream is open."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: collections.deque[StreamEvent | None] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: StreamEvent | None) -> None:
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def get_nowait(self) -> StreamEvent | None:
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)

    async def get(self, timeout_s: float | None = None) -> StreamEvent | None:
        """The next item; TimeoutError when none came within ``timeout_s``."""
        if not self._items:
            if self._waiter is not None:
                raise RuntimeError("an EventQueue has one reader at a time")
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = None if timeout_s is None else loop.call_later(timeout_s, _time_out, waiter)
            try:
                await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
        return self._items.popleft()


def _time_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class StreamConnection:
    """One open SSE response. The HTTP adapter reads events from ``queue``;
    ``None`` in the queue means the orchestrator closed the stream."""

    __slots__ = ("connection_id", "queue")

    def __init__(self) -> None:
        self.connection_id = next(_connection_ids)
        self.queue = EventQueue()

    def send(self, event: StreamEvent) -> None:
        self.queue.put_nowait(event)

    def close(self) -> None:
        self.queue.put_nowait(None)


class Outbox:
    """Events kept until acknowledged, in id order."""

    __slots__ = ("_events", "last_event_id")

    def __init__(self, last_event_id: int = 0) -> None:
        self._events: list[StreamEvent] = []
        self.last_event_id = last_event_id

    def add(
        self, type_: str, data: dict[str, Any], job_id: str | None = None, *, keep: bool = True
    ) -> StreamEvent:
        """A new event with the next id; ``keep=False`` for events a reconnect re-derives."""
        self.last_event_id += 1
        event = StreamEvent(self.last_event_id, type_, {"type": type_, **data}, job_id)
        if keep:
            self._events.append(event)
        return event

    def acknowledge_job(self, job_id: str, type_: str | None = None) -> None:
        """Forget a job's events (all of them, or those of one type)."""
        self._events = [
            e
            for e in self._events
            if not (e.job_id == job_id and (type_ is None or e.type == type_))
        ]

    def find(self, job_id: str, type_: str) -> dict[str, Any] | None:
        """The data of a kept (unacknowledged) event of a job, by type; None if there is none."""
        event = self.find_event(job_id, type_)
        return event.data if event is not None else None

    def find_event(self, job_id: str, type_: str) -> StreamEvent | None:
        """A kept (unacknowledged) event of a job, by type; None if there is none."""
        for event in self._events:
            if event.job_id == job_id and event.type == type_:
                return event
        return None

    def acknowledge_type(self, type_: str) -> None:
        self._events = [e for e in self._events if e.type != type_]

    def replay(self, after_id: int | None, force_job_id: str | None = None) -> list[StreamEvent]:
        """Events the agent has not seen: those after ``after_id``, plus the job_submit
        of ``force_job_id`` whatever its id (the agent said it does not hold that job)."""
        if after_id is None or after_id > self.last_event_id:
            # No id, or an id from before an orchestrator restart reset nothing we know of.
            return list(self._events)
        return [
            e
            for e in self._events
            if e.event_id is not None
            and (e.event_id > after_id or (force_job_id is not None and e.job_id == force_job_id))
        ]

    def __len__(self) -> int:
        return len(self._events)
