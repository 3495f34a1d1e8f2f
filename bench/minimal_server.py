"""The yardstick: the simplest correct server for the part of tunefleet's protocol the
fleet benchmarks use, on tunefleet's own stack (aiohttp, aiohttp-sse, SQLite).

    python -m bench.minimal_server --port 8101 --db /tmp/minimal.db

It serves, with tunefleet's paths, headers and JSON shapes (shared/PROTOCOL.md):
``POST /api/admin/workers`` (create a worker and its token), ``POST /api/queue/submit``
(``Authorization: Bearer <admin token>``), and as a worker (``X-Worker-Token``)
``POST /api/workers/register``, ``GET /api/workers/stream`` (``job_submit`` and
``ping`` events), ``POST /api/workers/heartbeat`` and
``POST /api/workers/job/{id}/status``; plus ``GET /readyz``.

What it does guarantee, as tunefleet does: every state change is committed to SQLite
(WAL, ``synchronous=FULL``) before it is acknowledged or sent. One writer thread
commits; whatever was queued while it was busy goes into the next transaction (group
commit), and each request is answered when its own write is durable. A job placed on
an idle worker is written once, already dispatched. A worker gets its next job only
after the answer to its completion report is written (SimpleTuner's agent drops a
``job_submit`` that arrives while that report is in flight). A failed commit ends the
process (memory changes first, but nothing uncommitted was answered or sent); the state
is reloaded at start. Heartbeats are kept in memory and written once a second, as
tunefleet does.

What it omits that tunefleet guarantees (the honest part of the comparison):
- no acknowledgement timeout: a ``job_submit`` lost with its stream stays with that
  worker until the worker registers again (it is then requeued); no ``Last-Event-ID``
  replay, no event ids;
- no failure detection: a worker that stops heartbeating keeps its job; no requeue
  on a lost stream, no retries, no attempts beyond the first, no stale-attempt checks;
  a closed stream is noticed when a job would go to it (tunefleet: within 0.25 s), and
  a peer that vanished without closing its socket is not bounded at all;
- no audit trail, no job timeline or history, no HA leadership or fencing (one
  process, one SQLite file), no PostgreSQL;
- no actors: plain dicts mutated on the event loop;
- one admin token with every permission: no API keys, users, permissions or rate
  limits; worker tokens are checked by hash, nothing more;
- no configuration catalog (``config`` inline only), targets, labels, VRAM or GPU name
  matching, priorities or cancellation: a job asks for ``gpu_count`` GPUs and goes
  to the longest-idle connected worker with that many, or waits in FIFO order;
- no upload tokens, artifacts, job logs, metrics, request ids, access or info logging,
  body schemas beyond what the handlers read, drain, shutdown, or the rest of the API.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import logging
import os
import queue
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp_sse import EventSourceResponse

log = logging.getLogger("minimal_server")
# The benchmarks' admin token (bench/orchestrator_proc.py); any fixed token will do.
ADMIN_TOKEN = "tf_bench-admin-token-not-a-secret-0123456789abcdef"
PING_S = 30.0
HEARTBEAT_FLUSH_S = 1.0
TERMINAL = frozenset({"completed", "failed", "cancelled"})
SCHEMA = """
CREATE TABLE IF NOT EXISTS workers (
    worker_id TEXT PRIMARY KEY, token_hash TEXT UNIQUE NOT NULL, name TEXT NOT NULL,
    gpu_count INTEGER NOT NULL DEFAULT 0, gpu TEXT, current_job_id TEXT,
    last_heartbeat REAL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, state TEXT NOT NULL, worker_id TEXT, config TEXT NOT NULL,
    gpu_count INTEGER NOT NULL, submitted_at REAL NOT NULL, updated_at REAL NOT NULL);
"""
Statement = tuple[str, tuple[Any, ...]]


class Writer:
    """The one thread that writes. ``write`` queues statements and returns a future that
    resolves once they are committed; everything queued meanwhile shares the commit."""

    def __init__(self, path: str, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.executescript(SCHEMA)
        self.queue: queue.SimpleQueue[tuple[list[Statement], asyncio.Future[None]] | None]
        self.queue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="sqlite-writer", daemon=True)
        self.commits = self.writes = 0  # writes per commit: how much group commit groups

    def write(self, *statements: Statement) -> asyncio.Future[None]:
        done: asyncio.Future[None] = self.loop.create_future()
        self.queue.put((list(statements), done))
        return done

    def _run(self) -> None:
        while True:
            first = self.queue.get()
            if first is None:
                return
            group, stopping = [first], False
            while not stopping:  # whatever queued up during the last commit joins this one
                try:
                    item = self.queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                else:
                    group.append(item)
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                for statements, _ in group:
                    for sql, params in statements:
                        self.conn.execute(sql, params)
                self.conn.execute("COMMIT")
            except Exception:
                # Memory already holds these changes: rather than undo them, stop. A
                # restart reloads what was committed.
                log.exception("commit failed; exiting")
                os._exit(70)
            self.commits += 1
            self.writes += len(group)
            self.loop.call_soon_threadsafe(_resolve, [done for _, done in group])
            if stopping:
                return

    def stop(self) -> None:
        self.queue.put(None)
        self.thread.join(timeout=30)
        self.conn.close()


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for done in futures:
        if not done.done():
            done.set_result(None)


@dataclass(eq=False)
class Worker:
    worker_id: str
    name: str
    gpu_count: int = 0
    job_id: str | None = None
    registered: bool = False
    stream: asyncio.Queue[dict[str, Any] | None] | None = None
    transport: asyncio.BaseTransport | None = None  # the stream's
    last_heartbeat: float | None = None


@dataclass(eq=False)
class Job:
    job_id: str
    state: str  # pending, dispatched, running, completed, failed, cancelled
    config: dict[str, Any]
    gpu_count: int
    worker_id: str | None = None
    event: dict[str, Any] = field(default_factory=dict)


class Fleet:
    """All state, in memory, changed only on the event loop; every change is written."""

    def __init__(self, writer: Writer) -> None:
        self.db = writer
        self.workers: dict[str, Worker] = {}
        self.by_token: dict[str, Worker] = {}
        self.jobs: dict[str, Job] = {}
        self.pending: collections.deque[Job] = collections.deque()
        self.idle: dict[str, Worker] = {}  # connected, no job; longest idle first
        self.beats: set[Worker] = set()  # heartbeats not yet written

    def load(self) -> None:
        """What was committed before a restart (before the writer thread starts)."""
        conn = self.db.conn
        for wid, token_hash, name, gpus, job_id in conn.execute(
            "SELECT worker_id, token_hash, name, gpu_count, current_job_id FROM workers"
        ):
            self.workers[wid] = self.by_token[token_hash] = Worker(wid, name, gpus, job_id)
        for job_id, state, wid, config, gpus in conn.execute(
            "SELECT job_id, state, worker_id, config, gpu_count FROM jobs"
            " WHERE state NOT IN ('completed', 'failed', 'cancelled') ORDER BY rowid"
        ):
            job = self.jobs[job_id] = Job(job_id, state, json.loads(config), gpus, wid)
            if state == "pending":
                self.pending.append(job)
            else:
                job.event = job_submit(job)

    # --- changes ------------------------------------------------------------------------

    async def place(self, job: Job, worker: Worker, first_write: Statement | None = None) -> None:
        """Give ``job`` to ``worker`` (off the idle list): write it, then send it. A new
        job's ``first_write`` inserts it already dispatched, in the same commit."""
        job.state, job.worker_id, worker.job_id = "dispatched", worker.worker_id, job.job_id
        job.event = job_submit(job)
        await self.db.write(
            first_write or
            ("UPDATE jobs SET state='dispatched', worker_id=?, updated_at=? WHERE job_id=?",
             (worker.worker_id, time.time(), job.job_id)),
            ("UPDATE workers SET current_job_id=? WHERE worker_id=?",
             (job.job_id, worker.worker_id)),
        )  # fmt: skip
        if worker.stream is not None and worker.job_id == job.job_id:
            worker.stream.put_nowait(job.event)

    def idle_worker_for(self, job: Job) -> Worker | None:
        """The longest-idle worker that fits, taken off the idle list. A worker whose
        stream's peer has gone (aiohttp does not wake the handler) is dropped here."""
        for worker in list(self.idle.values()):
            if worker.transport is None or worker.transport.is_closing():
                del self.idle[worker.worker_id]
                if worker.stream is not None:
                    worker.stream.put_nowait(None)  # ends its handler
            elif worker.gpu_count >= job.gpu_count:
                del self.idle[worker.worker_id]
                return worker
        return None

    async def worker_free(self, worker: Worker) -> None:
        """A connected worker without a job: the first pending job it fits, else idle."""
        if worker.stream is None or worker.job_id is not None:
            return
        for job in self.pending:
            if worker.gpu_count >= job.gpu_count:
                self.pending.remove(job)
                self.idle.pop(worker.worker_id, None)
                await self.place(job, worker)
                return
        self.idle[worker.worker_id] = worker

    async def submit(self, config: dict[str, Any], gpu_count: int) -> dict[str, Any]:
        job = Job(f"job_{secrets.token_hex(8)}", "pending", config, gpu_count)
        self.jobs[job.job_id] = job
        worker = self.idle_worker_for(job)
        now = time.time()
        insert = (
            "INSERT INTO jobs (job_id, state, worker_id, config, gpu_count, submitted_at,"
            " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        row = (json.dumps(config), gpu_count, now, now)
        if worker is None:
            self.pending.append(job)
            await self.db.write((insert, (job.job_id, "pending", None, *row)))
        else:
            # Placed before it is first written: one commit stores it already dispatched.
            await self.place(
                job, worker, (insert, (job.job_id, "dispatched", worker.worker_id, *row))
            )
        return {
            "success": True,
            "job_id": job.job_id,
            "status": job.state,
            "allocated_worker_id": job.worker_id,
            "queue_position": self.pending.index(job) + 1 if job.state == "pending" else None,
            "reason": None if worker else "no idle worker fits; waiting",
            "error": None,
        }

    async def register(self, worker: Worker, gpu: dict[str, Any], agent_job: Any) -> dict[str, Any]:
        statements: list[Statement] = [
            ("UPDATE workers SET gpu_count=?, gpu=? WHERE worker_id=?",
             (gpu["count"], json.dumps(gpu), worker.worker_id)),
        ]  # fmt: skip
        worker.gpu_count, worker.registered = gpu["count"], True
        resume, abandon = None, None
        held = self.jobs.get(worker.job_id) if worker.job_id else None
        if held is not None and held.job_id == agent_job:
            resume = {"job_id": held.job_id, "config_name": None, "status": held.state}
        else:
            abandon = agent_job or None  # a job it names that is not its own
            if held is not None:
                # The agent does not hold the job we gave it (a lost job_submit): requeue.
                held.state, held.worker_id, worker.job_id = "pending", None, None
                self.pending.appendleft(held)
                statements += [
                    ("UPDATE jobs SET state='pending', worker_id=NULL WHERE job_id=?",
                     (held.job_id,)),
                    ("UPDATE workers SET current_job_id=NULL WHERE worker_id=?",
                     (worker.worker_id,)),
                ]  # fmt: skip
        await self.db.write(*statements)
        if held is not None and held.state == "pending":  # requeued: another may take it
            other = self.idle_worker_for(held)
            if other is not None:
                self.pending.remove(held)
                await self.place(held, other)
        return {
            "worker_id": worker.worker_id,
            "sse_url": f"/api/workers/stream?worker_id={worker.worker_id}",
            "resume_job": resume,
            "abandon_job": abandon,
        }

    async def report(self, worker: Worker, job: Job, status: str) -> bool:
        """Apply a status report; True when the job ended (the worker is free once the
        answer is written)."""
        if status in TERMINAL:
            job.state, worker.job_id = status, None
            await self.db.write(
                ("UPDATE jobs SET state=?, updated_at=? WHERE job_id=?",
                 (status, time.time(), job.job_id)),
                ("UPDATE workers SET current_job_id=NULL WHERE worker_id=?", (worker.worker_id,)),
            )  # fmt: skip
            return True
        if job.state == "dispatched":  # the first report acknowledges the dispatch
            job.state = "running"
            await self.db.write(
                ("UPDATE jobs SET state='running', updated_at=? WHERE job_id=?",
                 (time.time(), job.job_id))
            )  # fmt: skip
        return False

    async def flush_heartbeats(self) -> None:
        """Every second, the heartbeats seen meanwhile in one write (as tunefleet does:
        a write per heartbeat would cost more than the rest of the heartbeat)."""
        while True:
            await asyncio.sleep(HEARTBEAT_FLUSH_S)
            beats, self.beats = self.beats, set()
            if beats:
                sql = "UPDATE workers SET last_heartbeat=? WHERE worker_id=?"
                await self.db.write(*((sql, (w.last_heartbeat, w.worker_id)) for w in beats))


def job_submit(job: Job) -> dict[str, Any]:
    """The job_submit event as tunefleet sends it (upload fields empty: no artifacts)."""
    return {
        "type": "job_submit",
        "job_id": job.job_id,
        "config": job.config,
        "dataloader": None,
        "provider": None,
        "upload_endpoint": "",
        "upload_token": "",
        "hf_token": None,
        "attempt": 1,
    }


# --- HTTP ---------------------------------------------------------------------------------

FLEET: web.AppKey[Fleet] = web.AppKey("fleet", Fleet)
ADMIN: web.AppKey[str] = web.AppKey("admin", str)


def fail(status: int, detail: str) -> web.HTTPException:
    cls = {400: web.HTTPBadRequest, 401: web.HTTPUnauthorized, 403: web.HTTPForbidden,
           404: web.HTTPNotFound, 409: web.HTTPConflict}[status]  # fmt: skip
    return cls(text=json.dumps({"detail": detail}), content_type="application/json")


async def json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read() or b"{}")
    except ValueError:
        raise fail(400, "body is not JSON") from None
    if not isinstance(body, dict):
        raise fail(400, "body must be a JSON object")
    return body


def admin(request: web.Request) -> None:
    if request.headers.get("Authorization", "") != f"Bearer {request.app[ADMIN]}":
        raise fail(401, "Not authenticated")


def worker_of(request: web.Request, claimed_id: Any = None, check: bool = False) -> Worker:
    token = request.headers.get("X-Worker-Token", "")
    worker = request.app[FLEET].by_token.get(hashlib.sha256(token.encode()).hexdigest())
    if worker is None:
        raise fail(401, "Invalid worker token")
    if check and claimed_id != worker.worker_id:
        raise fail(400, "Worker ID mismatch")
    return worker


async def create_worker(request: web.Request) -> web.Response:
    admin(request)
    body = await json_body(request)
    fleet = request.app[FLEET]
    worker_id, token = f"w_{secrets.token_hex(6)}", f"wt_{secrets.token_urlsafe(24)}"
    name = str(body.get("name") or worker_id)
    token_hash = hashlib.sha256(token.encode()).hexdigest()
    await fleet.db.write(
        ("INSERT INTO workers (worker_id, token_hash, name, created_at) VALUES (?, ?, ?, ?)",
         (worker_id, token_hash, name, time.time()))
    )  # fmt: skip
    fleet.workers[worker_id] = fleet.by_token[token_hash] = Worker(worker_id, name)
    command = f"tunefleet worker --url http://{request.host} --token {token}"
    return web.json_response(
        {"worker_id": worker_id, "token": token, "name": name, "connection_command": command}
    )


async def register(request: web.Request) -> web.Response:
    worker = worker_of(request)
    body = await json_body(request)
    gpu = body.get("gpu_info") or {}  # nested, or the seed document's flat spelling
    count = gpu.get("count", body.get("gpu_count", 0)) if isinstance(gpu, dict) else 0
    if not isinstance(count, int) or count < 0:
        raise fail(400, "gpu count must be a non-negative integer")
    gpu = {"count": count, "name": body.get("gpu_name"), "vram_gb": body.get("gpu_vram_gb")}
    reply = await request.app[FLEET].register(worker, gpu, body.get("current_job_id"))
    return web.json_response(reply)


async def stream(request: web.Request) -> web.StreamResponse:
    worker = worker_of(request, request.query.get("worker_id"), check=True)
    if not worker.registered:
        raise fail(409, "worker is offline; register again (POST /api/workers/register)")
    fleet = request.app[FLEET]
    if worker.stream is not None:
        worker.stream.put_nowait(None)  # a newer stream replaces the old one
    events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    worker.stream = events
    worker.transport = request.transport
    job = fleet.jobs.get(worker.job_id) if worker.job_id else None
    if job is not None and job.state == "dispatched":
        events.put_nowait(job.event)  # not acknowledged yet: send it again
    sse = EventSourceResponse(ping_interval=86_400.0, sep="\n")
    try:
        await sse.prepare(request)
        await fleet.worker_free(worker)
        while True:
            try:
                event = await asyncio.wait_for(events.get(), PING_S)
            except TimeoutError:
                event = {"type": "ping"}
            if event is None:
                break
            await sse.send(json.dumps(event, separators=(",", ":")), event=event["type"])
    except (ConnectionResetError, RuntimeError):
        pass
    finally:
        if worker.stream is events:
            worker.stream = worker.transport = None
            fleet.idle.pop(worker.worker_id, None)
    return sse


async def heartbeat(request: web.Request) -> web.Response:
    body = await json_body(request)
    worker = worker_of(request, body.get("worker_id"), check=True)
    if not worker.registered:
        raise fail(409, "worker is offline; register again (POST /api/workers/register)")
    worker.last_heartbeat = time.time()
    request.app[FLEET].beats.add(worker)
    return web.json_response({"success": True})


async def job_status(request: web.Request) -> web.StreamResponse:
    worker = worker_of(request)
    body = await json_body(request)
    fleet = request.app[FLEET]
    job_id = request.match_info["job_id"]
    job = fleet.jobs.get(job_id)
    if job is None:
        raise fail(404, f"Job not found: {job_id}")
    if job.worker_id != worker.worker_id:
        raise fail(403, "Worker not assigned to this job")
    if job.state in TERMINAL:
        raise fail(409, f"job {job_id} is already {job.state}; abandon it")
    status = body.get("status")
    status = "running" if status == "training" else status  # SimpleTuner's agent's word
    if not isinstance(status, str) or status not in ("starting", "running", *TERMINAL):
        raise fail(400, f"unknown status {status!r}")
    ended = await fleet.report(worker, job, status)
    response = web.json_response({"success": True})
    if ended:
        # The next job only once this answer is on the wire.
        await response.prepare(request)
        await response.write_eof()
        await fleet.worker_free(worker)
    return response


async def submit(request: web.Request) -> web.Response:
    admin(request)
    body = await json_body(request)
    config, gpu_count = body.get("config"), body.get("gpu_count") or 0
    if not isinstance(config, dict):
        raise fail(400, "config must be an object (the minimal server has no config catalog)")
    if body.get("target", "worker") not in ("worker", "auto"):
        raise fail(400, "target must be worker or auto (no local runner)")
    if not isinstance(gpu_count, int) or gpu_count < 0:
        raise fail(400, "gpu_count must be a non-negative integer")
    return web.json_response(await request.app[FLEET].submit(config, gpu_count))


async def readyz(request: web.Request) -> web.Response:
    fleet = request.app[FLEET]
    return web.json_response(
        {
            "status": "ready",
            "workers": len(fleet.workers),
            "writes": fleet.db.writes,
            "commits": fleet.db.commits,
        }
    )


def make_app(db_path: str, admin_token: str = ADMIN_TOKEN) -> web.Application:
    app = web.Application()
    app[ADMIN] = admin_token

    async def lifecycle(app: web.Application) -> Any:
        writer = Writer(db_path, asyncio.get_running_loop())
        fleet = app[FLEET] = Fleet(writer)
        fleet.load()
        writer.thread.start()
        flusher = asyncio.ensure_future(fleet.flush_heartbeats())
        yield
        flusher.cancel()
        for worker in fleet.workers.values():
            if worker.stream is not None:
                worker.stream.put_nowait(None)
        await asyncio.sleep(0)
        writer.stop()

    app.cleanup_ctx.append(lifecycle)
    app.router.add_get("/readyz", readyz)
    app.router.add_post("/api/admin/workers", create_worker)
    app.router.add_post("/api/queue/submit", submit)
    app.router.add_post("/api/workers/register", register)
    app.router.add_get("/api/workers/stream", stream)
    app.router.add_post("/api/workers/heartbeat", heartbeat)
    app.router.add_post("/api/workers/job/{job_id}/status", job_status)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.minimal_server", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True, help="SQLite file (created when missing)")
    parser.add_argument("--admin-token", default=ADMIN_TOKEN)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    web.run_app(
        make_app(args.db, args.admin_token),
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        print=None,
        shutdown_timeout=5.0,
    )


if __name__ == "__main__":
    main()
