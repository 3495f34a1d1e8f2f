"""Webhooks and dispatch (issue 27): dispatch latency (submit → ``job_submit`` at the
worker) with no subscription, with 10 subscriptions whose receiver answers at once, and
with 10 whose receiver answers in 30 s (each delivery times out at 10 s and is retried,
so the sender holds ten connections the whole time). Fast against none is what writing
the outbox in the job's transactions costs; slow against fast is what a slow receiver
costs, which should be nothing beyond noise. One worker, one job at a time, as
dispatch_latency does.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bench import Row, row
from bench.fleet_common import (
    backends,
    cpu_note,
    latency_rows,
    machine_note,
    pick,
    save_raw,
    session,
    summary,
)
from bench.orchestrator_proc import ADMIN_TOKEN, Orchestrator, free_port

SAMPLES: int = pick(200, 40)
SUBSCRIBERS = 10
SLOW_S = 30.0


@dataclass
class _PrivateHooks(Orchestrator):
    """The orchestrator, allowed to send webhooks to the receiver on 127.0.0.1."""

    extra_args: list[str] = field(default_factory=lambda: ["--webhooks-allow-private"])


class _SlowReceiver:
    """Answers every delivery after SLOW_S seconds, on a thread of its own."""

    def __init__(self) -> None:
        self.port = free_port()
        self.received = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None
        asyncio.run_coroutine_threadsafe(self._up(), self._loop).result(10)

    async def _hook(self, request: web.Request) -> web.Response:
        self.received += 1
        if request.match_info["speed"] == "slow":
            await asyncio.sleep(SLOW_S)
        return web.Response(text="ok")

    async def _up(self) -> None:
        app = web.Application()
        app.router.add_post("/{speed}/{name}", self._hook)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _down(self) -> None:
        waiting = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in waiting:  # the handlers still sleeping out SLOW_S
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._down(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def _api(port: int, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    request.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def _subscribe_only(port: int, receiver: int, speed: str | None) -> None:
    """Replace every subscription with SUBSCRIBERS of ``speed`` (None: none)."""
    for hook in _api(port, "GET", "/api/admin/webhooks")["webhooks"]:
        _api(port, "DELETE", f"/api/admin/webhooks/{hook['id']}")
    for i in range(SUBSCRIBERS if speed else 0):
        url = f"http://127.0.0.1:{receiver}/{speed}/s{i}"
        _api(port, "POST", "/api/admin/webhooks", {"url": url})


def run() -> list[Row]:
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for backend in backends():
        rows += _run_backend(backend, raw)
    save_raw("webhooks", raw)
    return rows


def _run_backend(backend: str, raw: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    receiver = _SlowReceiver()
    try:
        with session(backend, "webhooks", server_class=_PrivateHooks) as s:
            s.call("set_mode", on_job="complete")
            s.fleet(1)
            phases = (
                ("no subscribers", None),
                (f"{SUBSCRIBERS} fast subscribers", "fast"),
                (f"{SUBSCRIBERS} slow subscribers", "slow"),
            )
            for label, speed in phases:
                _subscribe_only(s.server.port, receiver.port, speed)
                reply = s.call("dispatch", samples=SAMPLES)
                latencies = reply["result"]["latencies_ms"]
                raw[f"{backend} {label}"] = latencies
                note = f"{SAMPLES} samples; {cpu_note(reply)}; {machine_note()}"
                rows += latency_rows(
                    f"{backend} dispatch, {label}", latencies, {}, note, keys=("p50", "p99")
                )
            fast = summary(raw[f"{backend} {SUBSCRIBERS} fast subscribers"])["p50"]
            slow = summary(raw[f"{backend} {SUBSCRIBERS} slow subscribers"])["p50"]
            rows.append(
                row(
                    f"{backend} dispatch p50, slow minus fast subscribers",
                    round(slow - fast, 3),
                    "ms",
                    "within noise",
                    "what a 30 s receiver costs dispatch beyond writing the outbox; "
                    f"deliveries the receiver saw: {receiver.received}",
                )
            )
            s.call("close_streams")
    finally:
        receiver.close()
    return rows
