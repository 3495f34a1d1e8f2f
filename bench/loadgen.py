"""The load generator: many simulated workers speaking the real protocol, in a process
of its own (so its CPU is not the orchestrator's, and both are measured apart).

Each simulated worker is a ``SimWorker`` (a few slots) with an ``SseConnection`` for its
stream; requests (register, heartbeat, status, submit) share a pool of keep-alive
connections. The process is driven by its parent over stdin/stdout, one JSON line per
command and per reply, so a benchmark can kill and restart the orchestrator while the
workers live on and reconnect by themselves::

    gen = LoadGenProcess(port, server_pid).start()
    gen.call("create_workers", count=500)
    gen.call("register"); gen.call("open_streams")
    result = gen.call("dispatch", samples=200)

Every reply carries the command's wall time and the CPU both processes spent in it
(``loadgen_cpu_share``, ``server_cpu_share``: fractions of one core).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import select
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

from bench.loadgen_http import HttpError, HttpPool, SseConnection, build_request, open_stream
from bench.orchestrator_proc import ADMIN_TOKEN, ProcSample, proc_rss_bytes, raise_open_file_limit

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
SUBMIT_BODY: dict[str, Any] = {
    "config": {"max_train_steps": 1},
    "target": "worker",
    "gpu_count": 0,
    "name": "bench",
}


class SimWorker:
    __slots__ = (
        "headers",
        "index",
        "job_id",
        "last_event_id",
        "next_job_id",
        "reconnected_at",
        "registered",
        "resumed",
        "silent",
        "stream",
        "token",
        "worker_id",
    )

    def __init__(self, index: int, worker_id: str, token: str) -> None:
        self.index = index
        self.worker_id = worker_id
        self.token = token
        self.headers = {"X-Worker-Token": token}
        self.stream: SseConnection | None = None
        self.job_id: str | None = None
        # A job_submit that arrived while the previous job's final report was still in
        # flight: kept and run next, as tunefleet's agent does (job_slot), rather than
        # dropped as SimpleTuner's agent would (then the job waits out the ack timeout).
        self.next_job_id: str | None = None
        self.last_event_id: int | None = None
        self.registered = False
        self.silent = False  # stops heartbeating (a hung machine)
        self.reconnected_at: float | None = None
        self.resumed = False


class Arrival:
    __slots__ = ("attempt", "perf", "wall", "worker")

    def __init__(self, worker: SimWorker, attempt: int) -> None:
        self.perf = time.perf_counter()
        self.wall = time.time()
        self.worker = worker
        self.attempt = attempt


class LoadGen:
    """The simulated fleet, inside the load generator process."""

    def __init__(self, port: int, admin_token: str, server_pid: int | None, pool: int) -> None:
        self.port = port
        self.admin = {"Authorization": f"Bearer {admin_token}"}
        self.server_pid = server_pid
        self.pool = HttpPool(HOST, port, pool)
        self.pool_size = pool
        self.workers: list[SimWorker] = []
        self.on_job = "none"  # "complete" | "ack" | "none": what a worker does with a job
        self.reconnect = False
        self.closing = False
        self.arrivals: dict[tuple[str, int], Arrival] = {}
        self._waiters: dict[tuple[str, str], asyncio.Future[Any]] = {}
        self.events = 0
        self.errors: dict[str, int] = {}
        self.tasks: set[asyncio.Task[Any]] = set()

    # --- bookkeeping ----------------------------------------------------------------------

    def future(self, kind: str, key: str) -> asyncio.Future[Any]:
        """The one future for (kind, key), whichever side gets there first."""
        fut = self._waiters.get((kind, key))
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._waiters[(kind, key)] = fut
        return fut

    def resolve(self, kind: str, key: str, value: Any) -> None:
        fut = self.future(kind, key)
        if not fut.done():
            fut.set_result(value)

    def forget(self, kind: str, key: str) -> None:
        self._waiters.pop((kind, key), None)

    def count_error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            self.count_error(f"task: {type(error).__name__}: {error}"[:120])

    # --- requests -------------------------------------------------------------------------

    async def admin_request(self, method: str, path: str, body: Any = None) -> Any:
        status, payload = await self.pool.request(method, path, body, self.admin)
        if status >= 300:
            raise HttpError(f"{method} {path}: {status} {payload}")
        return payload

    async def submit(self, body: dict[str, Any] | None = None) -> str:
        payload = await self.admin_request("POST", "/api/queue/submit", body or SUBMIT_BODY)
        return str(payload["job_id"])

    async def worker_request(self, worker: SimWorker, path: str, body: Any) -> tuple[int, Any]:
        return await self.pool.request("POST", path, body, worker.headers)

    async def heartbeat(self, worker: SimWorker) -> int:
        body = {
            "worker_id": worker.worker_id,
            "status": "busy" if worker.job_id else "idle",
            "current_job_id": worker.job_id,
            "gpu_utilization": [0.0],
            "vram_used_gb": [0.0],
        }
        status, _ = await self.worker_request(worker, "/api/workers/heartbeat", body)
        return status

    async def report(self, worker: SimWorker, job_id: str, status: str) -> int:
        code, _ = await self.worker_request(
            worker, f"/api/workers/job/{job_id}/status", {"status": status}
        )
        return code

    def register_body(self, worker: SimWorker) -> dict[str, Any]:
        return {
            "name": f"bench-{worker.index}",
            "gpu_count": 1,
            "gpu_name": "Bench GPU",
            "gpu_vram_gb": 24,
            "persistent": True,
            "current_job_id": worker.job_id,
        }

    async def register(self, worker: SimWorker) -> dict[str, Any]:
        """Register; a busy orchestrator's 503/504 is retried a few times (counted in
        ``errors``), as an agent would."""
        for attempt in range(5):
            status, body = await self.worker_request(
                worker, "/api/workers/register", self.register_body(worker)
            )
            if status not in (503, 504):
                break
            self.count_error(f"register answered {status}, retried")
            if isinstance(body, dict) and "active_url" in body:
                # A standby (Retry-After: 1): as the agent does, ask again within a second.
                await asyncio.sleep(random.uniform(0.5, 1.0))
            else:
                await asyncio.sleep(0.5 * (attempt + 1))
        if status != 200:
            raise HttpError(f"register {worker.worker_id}: {status} {body}")
        worker.registered = True
        return dict(body)

    async def open_stream(self, worker: SimWorker) -> None:
        headers = dict(worker.headers)
        if worker.last_event_id is not None:
            headers["Last-Event-ID"] = str(worker.last_event_id)
        raw = build_request(
            "GET",
            f"/api/workers/stream?worker_id={worker.worker_id}",
            f"{HOST}:{self.port}",
            headers={**headers, "Accept": "text/event-stream"},
        )
        conn = await open_stream(HOST, self.port, raw, worker, self.on_event, self.on_close)
        status = await conn.opened
        if status != 200 or conn.closed_at is not None:
            raise HttpError(f"stream {worker.worker_id}: {status}, closed at once")
        worker.stream = conn

    # --- the stream ---------------------------------------------------------------------

    def on_event(self, conn: SseConnection, kind: str, data: bytes, event_id: int | None) -> None:
        worker: SimWorker = conn.owner
        self.events += 1
        if event_id is not None:
            worker.last_event_id = event_id
        if kind == "job_submit":
            payload = json.loads(data)
            job_id, attempt = payload["job_id"], int(payload.get("attempt") or 1)
            self.arrivals[(job_id, attempt)] = arrival = Arrival(worker, attempt)
            self.resolve("arrival", f"{job_id}#{attempt}", arrival)
            if worker.job_id is None:
                worker.job_id = job_id
                if self.on_job != "none":
                    self.spawn(self.run_job(worker, job_id))
            elif worker.job_id != job_id:
                worker.next_job_id = job_id
        elif kind == "job_cancel":
            job_id = json.loads(data).get("job_id")
            if worker.job_id == job_id:
                worker.job_id = None
            if worker.next_job_id == job_id:
                worker.next_job_id = None

    def on_close(self, conn: SseConnection) -> None:
        worker: SimWorker = conn.owner
        if worker.stream is conn:
            worker.stream = None
            self.resolve("stream_closed", worker.worker_id, conn.closed_at)
            if self.reconnect and not self.closing:
                self.spawn(self.reconnect_worker(worker))

    async def run_job(self, worker: SimWorker, job_id: str) -> None:
        """Acknowledge at once; with on_job == "complete", finish it at once too."""
        code = await self.report(worker, job_id, "running")
        self.resolve("acked", job_id, code)
        if self.on_job != "complete":
            return
        code = await self.report(worker, job_id, "completed")
        if worker.job_id == job_id:
            worker.job_id = None
        self.resolve("completed", job_id, code)
        if worker.job_id is None and worker.next_job_id is not None:
            worker.job_id, worker.next_job_id = worker.next_job_id, None
            self.spawn(self.run_job(worker, worker.job_id))

    async def reconnect_worker(self, worker: SimWorker) -> None:
        """A short jittered retry (not the agent's 1 s backoff), so the orchestrator's own
        recovery time is what gets measured."""
        for _ in range(2000):
            await asyncio.sleep(random.uniform(0.05, 0.15))
            if self.closing:
                return
            try:
                body = await self.register(worker)
                worker.resumed = body.get("resume_job") is not None
                if body.get("abandon_job"):
                    worker.job_id = None
                await self.open_stream(worker)
            except (HttpError, OSError):
                continue
            worker.reconnected_at = time.time()
            return

    # --- commands ---------------------------------------------------------------------

    async def bounded(
        self, items: list[Any], concurrency: int, fn: Callable[[Any], Awaitable[Any]]
    ) -> list[Any]:
        """fn over items with at most ``concurrency`` in flight; results in order."""
        results: list[Any] = [None] * len(items)
        cursor = iter(range(len(items)))

        async def lane() -> None:
            for i in cursor:
                results[i] = await fn(items[i])

        await asyncio.gather(*(lane() for _ in range(min(concurrency, len(items)) or 1)))
        return results

    async def cmd_create_workers(self, count: int, concurrency: int = 8) -> dict[str, Any]:
        start = len(self.workers)

        async def create(index: int) -> SimWorker:
            body = {"name": f"bench-{index}", "worker_type": "persistent"}
            made = await self.admin_request("POST", "/api/admin/workers", body)
            return SimWorker(index, made["worker_id"], made["token"])

        made = await self.bounded(list(range(start, start + count)), concurrency, create)
        self.workers.extend(made)
        return {"created": count, "workers": len(self.workers)}

    async def cmd_register(self, concurrency: int = 8) -> dict[str, Any]:
        todo = [w for w in self.workers if not w.registered]
        await self.bounded(todo, concurrency, self.register)
        return {"registered": len(todo)}

    async def cmd_open_streams(self, concurrency: int = 32) -> dict[str, Any]:
        todo = [w for w in self.workers if w.stream is None]
        await self.bounded(todo, concurrency, self.open_stream)
        return {"opened": len(todo), "streams": sum(w.stream is not None for w in self.workers)}

    async def cmd_set_mode(self, on_job: str = "none", reconnect: bool = False) -> dict[str, Any]:
        if on_job not in ("none", "ack", "complete"):
            raise ValueError(f"on_job must be none, ack or complete, not {on_job!r}")
        self.on_job, self.reconnect = on_job, reconnect
        for worker in self.workers:
            worker.reconnected_at = None
            worker.resumed = False
        return {}

    async def cmd_close_streams(self) -> dict[str, Any]:
        self.reconnect = False
        for worker in self.workers:
            if worker.stream is not None:
                worker.stream.close()
        await asyncio.sleep(0.2)
        return {"open": sum(w.stream is not None for w in self.workers)}

    async def cmd_set_port(self, port: int) -> dict[str, Any]:
        """Aim every later request and stream at another orchestrator (a standby taking
        over): what an agent given several URLs does when its orchestrator is gone."""
        self.pool.close()
        self.port = port
        self.pool = HttpPool(HOST, port, self.pool_size)
        return {}

    async def cmd_set_server_pid(self, pid: int) -> dict[str, Any]:
        self.server_pid = pid
        return {}

    async def cmd_status(self) -> dict[str, Any]:
        return {
            "workers": len(self.workers),
            "streams": sum(w.stream is not None for w in self.workers),
            "events": self.events,
            "errors": self.errors,
        }


Command = Callable[..., Awaitable[dict[str, Any]]]


def commands(gen: LoadGen) -> dict[str, Command]:
    from bench import loadgen_scenarios as scenarios

    table: dict[str, Command] = {
        name[4:]: getattr(gen, name) for name in dir(gen) if name.startswith("cmd_")
    }
    for name in scenarios.SCENARIOS:
        table[name] = _bind(getattr(scenarios, name), gen)
    return table


def _bind(fn: Callable[..., Awaitable[dict[str, Any]]], gen: LoadGen) -> Command:
    async def bound(**params: Any) -> dict[str, Any]:
        return await fn(gen, **params)

    return bound


class LagMonitor:
    """How late this process's own event loop runs (a busy or descheduled load
    generator shows up here, not as server latency)."""

    PERIOD_S = 0.005

    def __init__(self) -> None:
        self.lags_ms: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            expected = loop.time() + self.PERIOD_S
            await asyncio.sleep(self.PERIOD_S)
            self.lags_ms.append(max(0.0, loop.time() - expected) * 1000)
            if len(self.lags_ms) > 200_000:
                del self.lags_ms[:100_000]

    def take(self) -> dict[str, float]:
        lags, self.lags_ms = sorted(self.lags_ms), []
        if not lags:
            return {"loadgen_lag_p99_ms": 0.0, "loadgen_lag_max_ms": 0.0}
        return {
            "loadgen_lag_p99_ms": lags[min(len(lags) - 1, int(len(lags) * 0.99))],
            "loadgen_lag_max_ms": lags[-1],
        }


async def serve(gen: LoadGen, reader: asyncio.StreamReader, out: IO[str]) -> None:
    table = commands(gen)
    lag = LagMonitor()
    lag.start()
    while line := await reader.readline():
        request = json.loads(line)
        name, params = request["cmd"], request.get("params", {})
        if name == "exit":
            break
        reply: dict[str, Any]
        lag.take()
        cpu0, server0 = time.process_time(), _server_sample(gen)
        wall0 = time.monotonic()
        try:
            result = await table[name](**params)
            reply = {"ok": True, "result": result}
        except Exception as error:  # reported to the parent, which raises it there
            reply = {"ok": False, "error": f"{name}: {type(error).__name__}: {error}"}
        wall = time.monotonic() - wall0
        cpu = time.process_time() - cpu0
        reply["wall_s"] = wall
        reply["loadgen_cpu_s"] = cpu
        reply["loadgen_cpu_share"] = cpu / max(wall, 1e-9)
        reply.update(lag.take())
        server1 = _server_sample(gen)
        if server0 is not None and server1 is not None and server0.pid == server1.pid:
            reply["server_cpu_s"], reply["server_cpu_share"] = server1.cpu_since(server0)
            reply["server_rss"] = proc_rss_bytes(server1.pid)
        reply["errors"] = dict(gen.errors)
        out.write(json.dumps(reply) + "\n")
        out.flush()
    gen.closing = True
    for worker in gen.workers:
        if worker.stream is not None:
            worker.stream.close()
    gen.pool.close()


def _server_sample(gen: LoadGen) -> ProcSample | None:
    if gen.server_pid is None:
        return None
    try:
        return ProcSample.take(gen.server_pid)
    except OSError:
        return None


async def child_main(args: argparse.Namespace) -> None:
    raise_open_file_limit()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=16 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    gen = LoadGen(args.port, args.admin_token, args.server_pid, args.pool)
    await serve(gen, reader, sys.stdout)


class LoadGenError(Exception):
    """A command failed in the load generator, or it did not answer in time."""


class LoadGenProcess:
    """The parent's handle on a load generator process."""

    def __init__(self, port: int, server_pid: int | None, log_path: Path, pool: int = 32) -> None:
        self.port, self.server_pid, self.log_path, self.pool = port, server_pid, log_path, pool
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> LoadGenProcess:
        args = [sys.executable, "-m", "bench.loadgen", "--port", str(self.port)]
        args += ["--pool", str(self.pool), "--admin-token", ADMIN_TOKEN]
        if self.server_pid is not None:
            args += ["--server-pid", str(self.server_pid)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=REPO_ROOT,
            )
        return self

    @property
    def pid(self) -> int:
        if self.process is None:
            raise LoadGenError("the load generator is not running")
        return self.process.pid

    def call(self, cmd: str, timeout_s: float = 600.0, **params: Any) -> dict[str, Any]:
        """Run one command; its reply (``result`` plus the timing and CPU fields)."""
        proc = self.process
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise LoadGenError("the load generator is not running")
        proc.stdin.write(json.dumps({"cmd": cmd, "params": params}) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        line = proc.stdout.readline() if ready else ""
        if not line:
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise LoadGenError(
                f"{cmd}: no answer within {timeout_s:g} s (exit {proc.poll()}) {tail}"
            )
        reply: dict[str, Any] = json.loads(line)
        if not reply["ok"]:
            raise LoadGenError(reply["error"])
        return reply

    def close(self) -> None:
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
                proc.stdin.flush()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.process = None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--admin-token", default=ADMIN_TOKEN)
    parser.add_argument("--server-pid", type=int, default=None)
    parser.add_argument("--pool", type=int, default=32, help="keep-alive request connections")
    asyncio.run(child_main(parser.parse_args()))


if __name__ == "__main__":
    main()
