"""A private event loop on a thread of its own, so that ``Client`` is synchronous.

The transport is asyncio (aiohttp, shared with the command line). Running it with
``asyncio.run`` per call would fail in a notebook, whose own loop is already running in
the calling thread; a loop on its own thread works from anywhere. Ctrl-C in the caller
cancels the request under way.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from tunefleet.client.errors import ClientError

T = TypeVar("T")


class LoopThread:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tunefleet-client", daemon=True
        )
        self._thread.start()
        self.closed = False

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for it; an interrupt cancels it."""
        if self.closed:
            coro.close()
            raise ClientError("this Client is closed; make a new one")
        if threading.current_thread() is self._thread:
            coro.close()  # waiting on our own loop from inside it would never return
            raise ClientError(
                "a Client method was called from a callback the client runs (on_bytes); "
                "call it after the method returns"
            )
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # KeyboardInterrupt in the caller: stop the request too
            raise

    def iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        """An async iterator read one item at a time from the calling thread; leaving
        the loop early closes it (and the stream under it)."""

        async def step() -> tuple[bool, T | None]:
            try:
                return True, await items.__anext__()
            except StopAsyncIteration:
                return False, None

        try:
            while True:
                more, item = self.run(step())
                if not more:
                    return
                yield item  # type: ignore[misc]  # present when more is True
        finally:
            close = getattr(items, "aclose", None)
            if close is not None and not self.closed:
                self.run(close())

    def close(self, last: Coroutine[Any, Any, Any] | None = None) -> None:
        """Run ``last`` (closing the session), then stop the loop and its thread."""
        if self.closed:
            if last is not None:
                last.close()
            return
        try:
            if last is not None:
                self.run(last)
        finally:
            self.closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self._loop.close()
