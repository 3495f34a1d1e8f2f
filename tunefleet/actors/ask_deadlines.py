"""The timeouts of pending asks: one timer per distinct timeout, not one per ask.

A ``loop.call_later`` per ask costs a TimerHandle, a heap push, a cancel and, later, a
heap clean-up: about 5 µs, six asks a job cycle. Asks with the same timeout expire in
the order they were made (the loop's clock only goes forward), so each timeout keeps
its asks in a FIFO and one timer, armed for the oldest one still waiting.
"""

from __future__ import annotations

import asyncio
from collections import deque

from tunefleet.actors.errors import AskTimeout

# When it expires, the future it answers, the actor asked and the message asked.
_Pending = tuple[float, asyncio.Future[object], str, object]


class AskDeadlines:
    """Fails each watched ask's future with AskTimeout once its timeout has passed,
    unless it was answered (or cancelled) first. Used on one event loop at a time."""

    __slots__ = ("_loop", "_queues", "_timers")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queues: dict[float, deque[_Pending]] = {}
        self._timers: dict[float, asyncio.TimerHandle] = {}

    @property
    def watched(self) -> int:
        """Asks still held: waiting ones and answered ones not yet dropped."""
        return sum(len(queue) for queue in self._queues.values())

    def watch(
        self,
        loop: asyncio.AbstractEventLoop,
        reply: asyncio.Future[object],
        actor: str,
        message: object,
        timeout_s: float,
    ) -> None:
        if loop is not self._loop:
            # A new loop (the old one is closed): its asks and timers went with it.
            self._loop, self._queues, self._timers = loop, {}, {}
        queue = self._queues.get(timeout_s)
        if queue is None:
            queue = self._queues[timeout_s] = deque()
        # Answered asks leave from the front. One waiting there keeps those answered
        # after it until it is answered or expires: at most timeout_s worth of asks.
        while queue and queue[0][1].done():
            queue.popleft()
        deadline = loop.time() + timeout_s
        queue.append((deadline, reply, actor, message))
        if timeout_s not in self._timers:
            self._timers[timeout_s] = loop.call_at(deadline, self._expire, timeout_s, deadline)

    def _expire(self, timeout_s: float, due: float) -> None:
        loop = self._loop
        queue = self._queues.get(timeout_s)
        if loop is None or queue is None:
            return
        del self._timers[timeout_s]
        # The loop runs a timer up to its clock resolution early: `due` has passed.
        now = max(loop.time(), due)
        while queue:
            deadline, reply, actor, message = queue[0]
            if not reply.done():
                if deadline > now:
                    break
                reply.set_exception(AskTimeout(actor, type(message).__name__, timeout_s))
            queue.popleft()
        if queue:
            first = queue[0][0]
            self._timers[timeout_s] = loop.call_at(first, self._expire, timeout_s, first)
        else:
            del self._queues[timeout_s]
