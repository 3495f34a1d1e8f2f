"""Shared pieces for the agent loop tests: a small protocol server on 127.0.0.1 that
records every request, a scripted executor, a fake GPU, and an agent factory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tunefleet.agent.agent import Agent
from tunefleet.agent.executor import (
    EventCallback,
    JobOutcome,
    JobSpec,
    JobStarted,
    LogBatch,
    LogLine,
    ProgressReported,
)
from tunefleet.agent.gpu import GpuDevice, GpuInventory, GpuSample
from tunefleet.agent.job_slot import Executor
from tunefleet.agent.settings import AgentSettings

TOKEN = "wt_test_token_0123456789abcdef"
WORKER_ID = "w_test1"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)


class ProtocolServer:
    """The worker endpoints of PROTOCOL.md, just enough to drive an agent.

    Events pushed while no stream is open are replayed to the next one after its
    Last-Event-ID, as tunefleet's orchestrator does.
    """

    def __init__(self) -> None:
        self.token = TOKEN
        self.requests: list[Recorded] = []
        self.register_answers: list[dict[str, Any]] = []  # popped per registration
        self.status_errors: dict[str, tuple[int, str]] = {}  # job_id -> (status, detail)
        self.logs_endpoint = True
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.streams: list[asyncio.Queue[tuple[int, str, dict[str, Any]] | None]] = []
        self.stream_opens: list[str | None] = []  # the Last-Event-ID of each stream
        self.ping_interval_s: float | None = None
        self.pings_sent = 0
        self.heartbeat_refusals = 0  # answer this many heartbeats with 409 "offline"

    # --- what the tests read ------------------------------------------------------------

    def of(self, path_part: str, method: str = "POST") -> list[Recorded]:
        return [r for r in self.requests if r.method == method and path_part in r.path]

    @property
    def registrations(self) -> list[dict[str, Any]]:
        return [r.body for r in self.of("/api/workers/register")]

    @property
    def heartbeats(self) -> list[dict[str, Any]]:
        return [r.body for r in self.of("/api/workers/heartbeat")]

    def statuses(self, job_id: str) -> list[dict[str, Any]]:
        return [r.body for r in self.of(f"/api/workers/job/{job_id}/status")]

    def status_words(self, job_id: str) -> list[str]:
        return [body["status"] for body in self.statuses(job_id)]

    def log_lines(self, job_id: str) -> list[dict[str, Any]]:
        return [
            line for r in self.of(f"/api/workers/job/{job_id}/logs") for line in r.body["lines"]
        ]

    @property
    def disconnects(self) -> list[Recorded]:
        return self.of("/api/workers/disconnect")

    # --- what the tests do ----------------------------------------------------------------

    def push(self, type_: str, **data: Any) -> int:
        event_id = len(self.events) + 1
        event = (event_id, type_, {"type": type_, **data})
        self.events.append(event)
        for queue in self.streams:
            queue.put_nowait(event)
        return event_id

    def drop_streams(self) -> None:
        for queue in self.streams:
            queue.put_nowait(None)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        app.router.add_post("/api/workers/register", self._register)
        app.router.add_get("/api/workers/stream", self._stream)
        app.router.add_post("/api/workers/heartbeat", self._heartbeat)
        app.router.add_post("/api/workers/disconnect", self._ok)
        app.router.add_post("/api/workers/job/{job_id}/status", self._status)
        app.router.add_post("/api/workers/job/{job_id}/logs", self._logs)
        app.router.add_get("/api/workers/queue", self._queue)
        app.on_shutdown.append(self._end_streams)  # else stopping waits on open streams
        return app

    async def _end_streams(self, _app: web.Application) -> None:
        self.drop_streams()

    # --- handlers ---------------------------------------------------------------------------

    @web.middleware
    async def _record(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        text = await request.text()
        body = json.loads(text) if text else None
        self.requests.append(Recorded(request.method, request.path_qs, dict(request.headers), body))
        if request.headers.get("X-Worker-Token") != self.token:
            return web.json_response({"detail": "Invalid worker token"}, status=401)
        return await handler(request)

    async def _register(self, request: web.Request) -> web.Response:
        answer = {
            "worker_id": WORKER_ID,
            "sse_url": f"/api/workers/stream?worker_id={WORKER_ID}",
            "resume_job": None,
            "abandon_job": None,
        }
        if self.register_answers:
            answer.update(self.register_answers.pop(0))
        return web.json_response(answer)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        last = request.headers.get("Last-Event-ID")
        self.stream_opens.append(last)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        queue: asyncio.Queue[tuple[int, str, dict[str, Any]] | None] = asyncio.Queue()
        for event in self.events:
            if event[0] > int(last or 0):
                queue.put_nowait(event)
        self.streams.append(queue)
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), self.ping_interval_s)
                except TimeoutError:
                    await response.write(b'event: ping\ndata: {"type": "ping"}\n\n')
                    self.pings_sent += 1
                    continue
                if item is None:
                    break
                event_id, type_, data = item
                frame = f"id: {event_id}\nevent: {type_}\ndata: {json.dumps(data)}\n\n"
                await response.write(frame.encode())
        finally:
            self.streams.remove(queue)
        return response

    async def _heartbeat(self, request: web.Request) -> web.Response:
        if self.heartbeat_refusals:
            self.heartbeat_refusals -= 1
            detail = "worker is offline; register again (POST /api/workers/register)"
            return web.json_response({"detail": detail}, status=409)
        return web.json_response({"success": True})

    async def _ok(self, request: web.Request) -> web.Response:
        return web.json_response({"success": True})

    async def _status(self, request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        if job_id in self.status_errors:
            status, detail = self.status_errors[job_id]
            return web.json_response({"detail": detail}, status=status)
        return web.json_response({"success": True})

    async def _logs(self, request: web.Request) -> web.Response:
        if not self.logs_endpoint:
            return web.json_response({"detail": "Not Found"}, status=404)
        return web.json_response({"success": True})

    async def _queue(self, request: web.Request) -> web.Response:
        return web.json_response({"has_jobs": False})


# --- the executor and the GPUs ---------------------------------------------------------------


class FakeJob:
    def __init__(self, spec: JobSpec, on_event: EventCallback) -> None:
        self.spec = spec
        self.on_event = on_event
        self.finish: asyncio.Future[JobOutcome] = asyncio.get_running_loop().create_future()
        self.cancel_reason: str | None = None
        self._seq = 0

    async def log(self, *lines: str) -> None:
        batch = []
        for line in lines:
            self._seq += 1
            batch.append(LogLine(self._seq, "stdout", line, time.time()))
        await self.on_event(LogBatch(batch))

    async def progress(self, **values: Any) -> None:
        await self.on_event(ProgressReported(dict(values)))

    def complete(self) -> None:
        self.finish.set_result(JobOutcome("completed", 0, None, []))


Behaviour = Callable[[FakeJob], Coroutine[Any, Any, None]]


async def quiet(job: FakeJob) -> None:
    """Prints nothing until told to finish."""


class FakeExecutor:
    """Runs "jobs" that the test finishes (``current.complete()``) or that end when
    cancelled, as the real executor does (cancelled outcome with the reason)."""

    def __init__(self, behaviour: Behaviour = quiet) -> None:
        self.behaviour = behaviour
        self.runs: list[JobSpec] = []
        self.cancels: list[str] = []
        self.preempt_graces: list[float | None] = []  # per cancel: a preemption's grace
        self.current: FakeJob | None = None
        self.jobs: list[FakeJob] = []

    async def run(self, spec: JobSpec, on_event: EventCallback) -> JobOutcome:
        job = FakeJob(spec, on_event)
        self.current = job
        self.runs.append(spec)
        self.jobs.append(job)
        try:
            await on_event(JobStarted(4242, Path("/tmp/fake-job")))
            acting = asyncio.create_task(self.behaviour(job))
            try:
                return await job.finish
            finally:
                acting.cancel()
        finally:
            self.current = None

    async def cancel(self, reason: str = "cancelled", preempt_grace_s: float | None = None) -> None:
        self.cancels.append(reason)
        self.preempt_graces.append(preempt_grace_s)
        job = self.current
        if job is not None and not job.finish.done():
            job.cancel_reason = reason
            job.finish.set_result(JobOutcome("cancelled", -15, reason, []))


class FakeGpu:
    def __init__(self) -> None:
        self.samples = 0

    def inventory(self) -> GpuInventory:
        device = GpuDevice(0, "NVIDIA A100-SXM4-80GB", 79.2, "GPU-0")
        return GpuInventory((device,), driver_version="550.54", cuda_version="12.4")

    def sample(self) -> GpuSample:
        self.samples += 1
        return GpuSample([42.0], [10.5])


# --- the agent ------------------------------------------------------------------------------


class RecordingSleep:
    """Records the delays the agent asks for and sleeps briefly instead."""

    def __init__(self, cap_s: float = 0.02) -> None:
        self.cap_s = cap_s
        self.delays: list[float] = []

    async def __call__(self, delay_s: float) -> None:
        self.delays.append(delay_s)
        await asyncio.sleep(min(delay_s, self.cap_s))


def make_agent(
    url: str,
    *,
    executor: Executor | None = None,
    sleep: RecordingSleep | None = None,
    **overrides: Any,
) -> Agent:
    options: dict[str, Any] = {
        "orchestrator_url": url,
        "worker_token": TOKEN,
        "name": "test-worker",
        "persistent": True,
        "labels": {"zone": "test"},
        "heartbeat_interval_s": 0.05,
        "stream_timeout_s": 5.0,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
        "request_timeout_s": 2.0,
        "stop_timeout_s": 3.0,
        "hostname": "test-host",
    }
    options.update(overrides)
    return Agent(
        AgentSettings(**options),
        executor=executor or FakeExecutor(),
        gpu=FakeGpu(),
        sleep=sleep or RecordingSleep(),
        rng=random.Random(7),
    )


async def eventually(check: Callable[[], object], what: str, timeout_s: float = 5.0) -> None:
    """Wait (bounded) until ``check()`` is true; fail saying what never happened."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def running(agent: Agent) -> AsyncIterator[asyncio.Task[None]]:
    """Run the agent for the block; stop it (bounded) afterwards if it still runs."""
    task = asyncio.create_task(agent.run())
    try:
        yield task
    finally:
        if not task.done():
            agent.request_stop("test over")
            done, _ = await asyncio.wait({task}, timeout=5.0)
            if not done:
                task.cancel()
        with contextlib.suppress(BaseException):
            await task
