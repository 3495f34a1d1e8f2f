"""EventQueue: the light one-reader queue each open worker stream holds."""

from __future__ import annotations

import asyncio

import pytest

from tunefleet.actors.stream import EventQueue, StreamEvent


def _event(n: int) -> StreamEvent:
    return StreamEvent(n, "ping", {"type": "ping"})


async def test_items_come_out_in_order_and_none_closes() -> None:
    queue = EventQueue()
    queue.put_nowait(_event(1))
    queue.put_nowait(_event(2))
    queue.put_nowait(None)
    assert queue.qsize() == 3
    assert [await queue.get(), await queue.get(), queue.get_nowait()] == [
        _event(1),
        _event(2),
        None,
    ]
    assert queue.empty()
    with pytest.raises(asyncio.QueueEmpty):
        queue.get_nowait()


async def test_a_waiting_reader_wakes_on_put() -> None:
    queue = EventQueue()
    reader = asyncio.ensure_future(queue.get(timeout_s=30))
    await asyncio.sleep(0)
    assert not reader.done()
    queue.put_nowait(_event(7))
    assert await reader == _event(7)


async def test_a_timed_wait_raises_timeout_and_the_queue_stays_usable() -> None:
    queue = EventQueue()
    with pytest.raises(TimeoutError):
        await queue.get(timeout_s=0.01)
    queue.put_nowait(_event(1))
    assert await queue.get(timeout_s=0.01) == _event(1)


async def test_one_reader_at_a_time_and_a_cancelled_reader_leaves_no_trace() -> None:
    queue = EventQueue()
    first = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="one reader"):
        await queue.get()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    queue.put_nowait(_event(3))  # no stale waiter to wake
    assert await queue.get() == _event(3)
