"""A webhook receiver for tests with real processes: aiohttp on 127.0.0.1, on a thread of
its own, recording every delivery; it can go away and come back on the same port."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from aiohttp import web

from tests.e2e.harness import free_port


class Receiver:
    """An aiohttp receiver on its own thread and loop, which can go away and come back
    on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.got: list[dict[str, Any]] = []
        self.status = 200  # what it answers
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _hook(self, request: web.Request) -> web.Response:
        raw = await request.read()
        with self._lock:
            self.got.append({"headers": dict(request.headers), "raw": raw, "json": json.loads(raw)})
        return web.Response(status=self.status, text="ok")

    async def _up(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()

    async def _down(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def up(self) -> None:
        asyncio.run_coroutine_threadsafe(self._up(), self._loop).result(10)

    def down(self) -> None:
        asyncio.run_coroutine_threadsafe(self._down(), self._loop).result(10)

    def close(self) -> None:
        self.down()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def events_of(self, job_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [g for g in self.got if g["json"]["data"].get("job_id") == job_id]
