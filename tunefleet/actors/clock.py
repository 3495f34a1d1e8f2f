"""Injectable time: the real event-loop clock, and a fake one tests advance by hand.

Everything that waits on domain time (heartbeat deadlines, acknowledgement and
retention timeouts) goes through a `Clock`, so a test can run a 120-second timeout
in milliseconds: it advances a `FakeClock` instead of sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable
from typing import Protocol

# Timer callbacks may return anything (e.g. `partial(actor.try_tell, message)`);
# the result is ignored, as asyncio does.
TimerCallback = Callable[[], object]

# Repeated float additions (advance(0.1) ten times) may land a hair short of a
# timer's due time; a nanosecond of slack fires it anyway.
_DUE_SLACK_S = 1e-9


class Timer(Protocol):
    """A scheduled callback. `when` is on the clock's monotonic scale."""

    @property
    def when(self) -> float: ...

    @property
    def cancelled(self) -> bool: ...

    def cancel(self) -> None: ...


class Clock(Protocol):
    def time(self) -> float:
        """Unix seconds (UTC), for records and timestamps."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps, for deadlines and durations."""
        ...

    def call_later(self, delay_s: float, callback: TimerCallback) -> Timer: ...

    def call_at(self, when_monotonic: float, callback: TimerCallback) -> Timer: ...

    async def sleep(self, delay_s: float) -> None: ...


class LoopTimer:
    """A `Timer` over an asyncio `TimerHandle`."""

    __slots__ = ("_handle", "when")

    def __init__(self, handle: asyncio.TimerHandle, when: float) -> None:
        self._handle = handle
        self.when = when

    @property
    def cancelled(self) -> bool:
        return self._handle.cancelled()

    def cancel(self) -> None:
        self._handle.cancel()


class RealClock:
    """Wall time from `time.time()`, timers from the running event loop."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay_s: float, callback: TimerCallback) -> LoopTimer:
        delay_s = max(0.0, delay_s)
        handle = asyncio.get_running_loop().call_later(delay_s, callback)
        return LoopTimer(handle, time.monotonic() + delay_s)

    def call_at(self, when_monotonic: float, callback: TimerCallback) -> LoopTimer:
        # Relative scheduling: the loop's own time base need not be time.monotonic().
        return self.call_later(when_monotonic - time.monotonic(), callback)

    async def sleep(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)


def _wake(sleeper: asyncio.Future[None]) -> None:
    if not sleeper.done():
        sleeper.set_result(None)


class FakeTimer:
    __slots__ = ("_callback", "_clock", "cancelled", "fired", "when")

    def __init__(self, clock: FakeClock, when: float, callback: TimerCallback) -> None:
        self._clock = clock
        self._callback: TimerCallback | None = callback
        self.when = when
        self.cancelled = False
        self.fired = False

    def cancel(self) -> None:
        if self.cancelled or self.fired:
            return
        self.cancelled = True
        self._callback = None  # drop what the callback holds on to
        self._clock._cancelled_in_heap += 1

    def __repr__(self) -> str:
        status = "cancelled" if self.cancelled else "fired" if self.fired else "pending"
        return f"<FakeTimer when={self.when} {status}>"


class FakeClock:
    """A clock that moves only when a test calls `advance`.

    `time()` starts at `start` (unix seconds) and `monotonic()` at 1000.0 (not zero,
    so code that treats 0.0 as "unset" fails here as it would in production); both
    move together. `advance(0)` fires nothing new but lets the loop settle.
    """

    def __init__(self, start: float = 1_700_000_000.0, *, settle_rounds: int = 10) -> None:
        if settle_rounds < 1:
            raise ValueError("settle_rounds must be at least 1")
        self._monotonic = 1000.0
        self._wall_offset = start - self._monotonic
        self._settle_rounds = settle_rounds
        self._heap: list[tuple[float, int, FakeTimer]] = []
        self._seq = 0  # breaks ties so timers due together fire in scheduling order
        self._cancelled_in_heap = 0

    def time(self) -> float:
        return self._monotonic + self._wall_offset

    def monotonic(self) -> float:
        return self._monotonic

    def call_later(self, delay_s: float, callback: TimerCallback) -> FakeTimer:
        return self.call_at(self._monotonic + max(0.0, delay_s), callback)

    def call_at(self, when_monotonic: float, callback: TimerCallback) -> FakeTimer:
        timer = FakeTimer(self, when_monotonic, callback)
        self._seq += 1
        heapq.heappush(self._heap, (when_monotonic, self._seq, timer))
        return timer

    def pending_timers(self) -> int:
        """Timers that will still fire (neither fired nor cancelled)."""
        return len(self._heap) - self._cancelled_in_heap

    async def sleep(self, delay_s: float) -> None:
        """Resolve once the clock is advanced `delay_s` past now."""
        if delay_s <= 0:
            await asyncio.sleep(0)
            return
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(delay_s, lambda: _wake(woken))
        try:
            await woken
        finally:
            timer.cancel()

    async def advance(self, seconds: float) -> None:
        """Move time forward, firing due timers in time order.

        Time is set to each timer's due time as it fires, and the event loop gets a
        few turns after each, so actors handle what the timer told them before the
        next one fires. A callback's exception propagates out of `advance`.
        """
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards (advance({seconds}))")
        target = self._monotonic + seconds
        # Let work already queued run first: it may arm timers that are due now.
        await self._settle()
        heap = self._heap
        while heap and heap[0][0] <= target + _DUE_SLACK_S:
            when, _, timer = heapq.heappop(heap)
            if timer.cancelled:
                self._cancelled_in_heap -= 1
                continue
            self._monotonic = max(self._monotonic, when)
            timer.fired = True
            callback, timer._callback = timer._callback, None
            if callback is not None:
                callback()
            await self._settle()
        self._monotonic = max(self._monotonic, target)

    async def _settle(self) -> None:
        for _ in range(self._settle_rounds):
            await asyncio.sleep(0)
