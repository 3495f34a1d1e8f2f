"""StreamWatch ends the streams whose transport is closing, and only those."""

from __future__ import annotations

import asyncio

from tunefleet.actors.stream import StreamConnection
from tunefleet.http.stream_watch import StreamWatch


class FakeTransport(asyncio.BaseTransport):
    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing


async def test_a_closing_transport_ends_its_stream_and_leaves_the_others() -> None:
    watch = StreamWatch(interval_s=0.01)
    gone, alive, detached = StreamConnection(), StreamConnection(), StreamConnection()
    gone_transport, alive_transport = FakeTransport(), FakeTransport()
    watch.add(gone, gone_transport)
    watch.add(alive, alive_transport)
    watch.add(detached, None)  # the request had lost its transport already
    gone_transport.closing = True
    await asyncio.sleep(0.05)
    assert gone.queue.get_nowait() is None  # the handler reads None and returns
    assert detached.queue.get_nowait() is None
    assert alive.queue.empty()
    assert list(watch) == [alive]
    await watch.close()


async def test_the_watch_stops_when_no_stream_is_open_and_starts_again() -> None:
    watch = StreamWatch(interval_s=0.01)
    conn, transport = StreamConnection(), FakeTransport()
    watch.add(conn, transport)
    watch.discard(conn)
    await asyncio.sleep(0.05)
    assert watch._task is not None and watch._task.done()
    later, later_transport = StreamConnection(), FakeTransport()
    watch.add(later, later_transport)
    later_transport.closing = True
    await asyncio.sleep(0.05)
    assert later.queue.get_nowait() is None and len(watch) == 0
    await watch.close()
