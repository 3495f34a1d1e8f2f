"""The injectable clocks: FakeClock ordering, cancel, sleep; RealClock smoke test."""

from __future__ import annotations

import asyncio
import time

import pytest

from tunefleet.actors.clock import Clock, FakeClock, RealClock


async def test_fake_clock_starts_at_given_unix_time_and_moves_both_scales() -> None:
    clock = FakeClock(start=1_000_000.0)
    mono = clock.monotonic()
    assert clock.time() == 1_000_000.0
    await clock.advance(2.5)
    assert clock.time() == 1_000_002.5
    assert clock.monotonic() == mono + 2.5


async def test_timers_fire_in_time_order_with_time_set_to_each_due_time() -> None:
    clock = FakeClock()
    fired: list[tuple[str, float]] = []
    start = clock.monotonic()

    def note(label: str) -> None:
        fired.append((label, clock.monotonic() - start))

    clock.call_later(3.0, lambda: note("c"))
    clock.call_later(1.0, lambda: note("a"))
    clock.call_at(start + 2.0, lambda: note("b"))
    clock.call_later(1.0, lambda: note("a2"))  # same due time: scheduling order
    clock.call_later(10.0, lambda: note("late"))

    await clock.advance(5.0)

    assert fired == [("a", 1.0), ("a2", 1.0), ("b", 2.0), ("c", 3.0)]
    assert clock.monotonic() - start == 5.0
    assert clock.pending_timers() == 1


async def test_timer_armed_by_a_firing_timer_fires_within_the_same_advance() -> None:
    clock = FakeClock()
    fired: list[float] = []
    start = clock.monotonic()

    def first() -> None:
        clock.call_later(1.0, lambda: fired.append(clock.monotonic() - start))

    clock.call_later(1.0, first)
    await clock.advance(3.0)
    assert fired == [2.0]


async def test_cancelled_timer_never_fires_and_is_not_pending() -> None:
    clock = FakeClock()
    fired: list[str] = []
    keep = clock.call_later(1.0, lambda: fired.append("keep"))
    drop = clock.call_later(1.0, lambda: fired.append("drop"))
    assert clock.pending_timers() == 2

    drop.cancel()
    drop.cancel()  # idempotent: must not count twice

    assert drop.cancelled
    assert clock.pending_timers() == 1
    await clock.advance(1.0)
    assert fired == ["keep"]
    assert not keep.cancelled
    assert clock.pending_timers() == 0
    keep.cancel()  # after firing: no effect, no negative count
    assert clock.pending_timers() == 0


async def test_repeated_small_steps_reach_a_timer_despite_float_rounding() -> None:
    clock = FakeClock()
    fired: list[bool] = []
    clock.call_later(1.0, lambda: fired.append(True))
    for _ in range(10):
        await clock.advance(0.1)
    assert fired == [True]


async def test_advance_lets_actors_react_between_timers() -> None:
    """A timer's callback wakes a task; the task runs before the next timer fires."""
    clock = FakeClock()
    order: list[str] = []
    event = asyncio.Event()

    async def reactor() -> None:
        await event.wait()
        await asyncio.sleep(0)  # a second hop still lands before the next timer
        order.append("reacted")

    task = asyncio.create_task(reactor())
    clock.call_later(1.0, event.set)
    clock.call_later(2.0, lambda: order.append("second timer"))
    await clock.advance(2.0)
    await task
    assert order == ["reacted", "second timer"]


async def test_work_queued_before_advance_runs_first_and_may_arm_due_timers() -> None:
    clock = FakeClock()
    fired: list[str] = []

    async def arm() -> None:
        clock.call_later(1.0, lambda: fired.append("armed"))

    task = asyncio.create_task(arm())  # not yet run when advance starts
    await clock.advance(1.0)
    await task
    assert fired == ["armed"]


async def test_fake_sleep_resolves_only_when_advanced_past_it() -> None:
    clock = FakeClock()
    sleeper = asyncio.create_task(clock.sleep(10.0))
    await clock.advance(9.0)
    assert not sleeper.done()
    await clock.advance(1.0)
    assert sleeper.done()
    await sleeper
    assert clock.pending_timers() == 0


async def test_fake_sleep_zero_returns_without_advancing() -> None:
    clock = FakeClock()
    before = clock.monotonic()
    await clock.sleep(0)
    assert clock.monotonic() == before


async def test_cancelled_fake_sleep_cancels_its_timer() -> None:
    clock = FakeClock()
    sleeper = asyncio.create_task(clock.sleep(5.0))
    await clock.advance(0)
    assert clock.pending_timers() == 1
    sleeper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sleeper
    assert clock.pending_timers() == 0


async def test_past_due_timer_fires_at_current_time_without_moving_it_back() -> None:
    clock = FakeClock()
    now = clock.monotonic()
    seen: list[float] = []
    clock.call_at(now - 5.0, lambda: seen.append(clock.monotonic()))
    clock.call_later(-1.0, lambda: seen.append(clock.monotonic()))
    await clock.advance(0)
    assert seen == [now, now]


async def test_advance_rejects_going_backwards() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="backwards"):
        await clock.advance(-1.0)


def test_settle_rounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="settle_rounds"):
        FakeClock(settle_rounds=0)


async def test_callback_error_propagates_and_time_stays_at_the_failing_timer() -> None:
    clock = FakeClock()
    start = clock.monotonic()
    fired: list[str] = []

    def broken() -> None:
        raise RuntimeError("timer bug")

    clock.call_later(1.0, broken)
    clock.call_later(2.0, lambda: fired.append("later"))
    with pytest.raises(RuntimeError, match="timer bug"):
        await clock.advance(3.0)
    assert clock.monotonic() == start + 1.0  # nothing after the failure was skipped
    assert fired == []
    await clock.advance(1.0)
    assert fired == ["later"]


async def test_real_clock_smoke() -> None:
    clock: Clock = RealClock()
    assert abs(clock.time() - time.time()) < 5.0
    start = clock.monotonic()
    fired = asyncio.Event()
    timer = clock.call_later(0.01, fired.set)
    assert timer.when >= start
    assert not timer.cancelled
    await asyncio.wait_for(fired.wait(), timeout=5.0)

    never: list[bool] = []
    cancelled = clock.call_at(clock.monotonic() + 0.01, lambda: never.append(True))
    cancelled.cancel()
    assert cancelled.cancelled
    await clock.sleep(0.02)
    assert never == []
    assert clock.monotonic() >= start
