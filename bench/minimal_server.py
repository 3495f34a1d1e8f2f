"""The yardstick: the simplest correct server for the part of tunefleet's protocol the
fleet benchmarks use, on tunefleet's own stack (aiohttp, aiohttp-sse, SQLite).

    python -m bench.minimal_server --port 8101 --db /tmp/minimal.db [--records tunefleet]

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

``--records tunefleet`` (off by default) makes it store, for each change of a job, the
rows tunefleet stores for it, in the same transactions, into tables with tunefleet's
columns, secondary indexes and foreign keys (enforced, as tunefleet opens SQLite): the
submission placed at once is the job row, its first attempt, its upload credential
(hashed; the token goes in the ``job_submit``), its ``submitted`` and ``dispatched``
timeline rows and two audit events; ``running`` the job's and the attempt's updates
and a timeline row; the end the same and an audit event. Audit events are hash-chained
as tunefleet's (sha256 over the previous hash and the event's canonical JSON), the
chain built on the writer thread inside the transaction, and each group's JSON lines
are appended to ``audit.jsonl`` beside the database after its commit, before anyone is
answered. Still plain dicts, plain sqlite3 and plain SQL: what it measures is the floor
cost of those rows on this stack, without tunefleet's actors, FSM, peewee, pydantic or
structlog. Workers are stored as by default (tunefleet's worker rows and their audit
events are written at creation and registration, not in a job cycle), and the worker
row is no longer written per job: which worker holds which job is read back from the
job table at start, as tunefleet does.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import hashlib
import json
import logging
import os
import queue
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
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
INSERT_JOBS = (
    "INSERT INTO jobs (job_id, state, worker_id, config, gpu_count, submitted_at, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
# --records tunefleet: tunefleet's tables for a job cycle's rows, as its migrations leave
# them on SQLite (columns, foreign keys, every secondary index), and the minimal workers.
TUNEFLEET_SCHEMA = (
    SCHEMA.split("CREATE TABLE IF NOT EXISTS jobs")[0]
    + """
CREATE TABLE IF NOT EXISTS "job" ("id" VARCHAR(64) NOT NULL PRIMARY KEY,
    "seq" INTEGER NOT NULL, "name" TEXT, "config_name" TEXT, "config" TEXT NOT NULL,
    "dataloader" TEXT, "command" TEXT, "env" TEXT NOT NULL, "target" VARCHAR(16) NOT NULL,
    "worker_labels" TEXT NOT NULL, "gpu_count" INTEGER NOT NULL, "min_vram_gb" REAL,
    "gpu_name" TEXT, "priority" INTEGER NOT NULL, "max_retries" INTEGER NOT NULL,
    "attempts" INTEGER NOT NULL, "timeout_minutes" REAL, "state" VARCHAR(16) NOT NULL,
    "worker_id" VARCHAR(64), "submitted_by" TEXT, "submitted_at" REAL NOT NULL,
    "dispatched_at" REAL, "started_at" REAL, "finished_at" REAL, "progress" TEXT,
    "error" TEXT, "wait_reason" TEXT, "updated_at" REAL NOT NULL,
    "local_unisolated" INTEGER, "user_name" TEXT, "team_name" TEXT);
CREATE UNIQUE INDEX IF NOT EXISTS "job_seq" ON "job" ("seq");
CREATE INDEX IF NOT EXISTS "job_state_seq" ON "job" ("state", "seq");
CREATE INDEX IF NOT EXISTS "job_worker_id" ON "job" ("worker_id");
CREATE INDEX IF NOT EXISTS "job_target_seq" ON "job" ("target", "seq");
CREATE INDEX IF NOT EXISTS "job_user_name_seq" ON "job" ("user_name", "seq");
CREATE INDEX IF NOT EXISTS "job_team_name_seq" ON "job" ("team_name", "seq");
CREATE TABLE IF NOT EXISTS "job_attempt" ("id" INTEGER NOT NULL PRIMARY KEY,
    "job_id" VARCHAR(64) NOT NULL, "number" INTEGER NOT NULL, "worker_id" VARCHAR(64),
    "dispatched_at" REAL NOT NULL, "started_at" REAL, "ended_at" REAL,
    "outcome" VARCHAR(16), "reason" TEXT,
    "log_bytes" INTEGER NOT NULL, "log_lines_dropped" INTEGER NOT NULL,
    "kind" VARCHAR(16), "signature" TEXT,
    FOREIGN KEY ("job_id") REFERENCES "job" ("id") ON DELETE CASCADE);
CREATE UNIQUE INDEX IF NOT EXISTS "job_attempt_job_id_number"
    ON "job_attempt" ("job_id", "number");
CREATE INDEX IF NOT EXISTS "job_attempt_ended_at" ON "job_attempt" ("ended_at");
CREATE TABLE IF NOT EXISTS "job_event" ("id" INTEGER NOT NULL PRIMARY KEY,
    "job_id" VARCHAR(64) NOT NULL, "at" REAL NOT NULL, "kind" VARCHAR(32) NOT NULL,
    "worker_id" VARCHAR(64), "attempt" INTEGER, "detail" TEXT NOT NULL,
    FOREIGN KEY ("job_id") REFERENCES "job" ("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS "job_event_job_id" ON "job_event" ("job_id");
CREATE TABLE IF NOT EXISTS "audit_event" ("id" INTEGER NOT NULL PRIMARY KEY,
    "at" REAL NOT NULL, "kind" VARCHAR(64) NOT NULL, "actor" TEXT, "client_address" TEXT,
    "target" TEXT, "outcome" VARCHAR(16) NOT NULL, "detail" TEXT NOT NULL,
    "prev_hash" VARCHAR(64) NOT NULL, "hash" VARCHAR(64) NOT NULL);
CREATE INDEX IF NOT EXISTS "audit_event_kind_id" ON "audit_event" ("kind", "id");
CREATE INDEX IF NOT EXISTS "audit_event_actor_id" ON "audit_event" ("actor", "id");
CREATE INDEX IF NOT EXISTS "audit_event_at" ON "audit_event" ("at");
CREATE TABLE IF NOT EXISTS "upload_token" ("id" INTEGER NOT NULL PRIMARY KEY,
    "job_id" VARCHAR(64) NOT NULL, "attempt" INTEGER NOT NULL,
    "token_hash" VARCHAR(128) NOT NULL, "created_at" REAL NOT NULL,
    FOREIGN KEY ("job_id") REFERENCES "job" ("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS "uploadtoken_job_id" ON "upload_token" ("job_id");
CREATE UNIQUE INDEX IF NOT EXISTS "uploadtoken_token_hash" ON "upload_token" ("token_hash");
"""
)
INSERT_JOB = (
    "INSERT INTO job (id, seq, name, config_name, config, dataloader, command, env, target,"
    " worker_labels, gpu_count, min_vram_gb, gpu_name, priority, max_retries, attempts,"
    " timeout_minutes, state, worker_id, submitted_by, submitted_at, dispatched_at,"
    " started_at, finished_at, progress, error, wait_reason, updated_at, local_unisolated,"
    " user_name, team_name)"
    " VALUES (?, ?, ?, NULL, ?, NULL, NULL, '{}', ?, '{}', ?, NULL, NULL, 0, 3, ?, NULL, ?,"
    " ?, ?, ?, ?, NULL, NULL, NULL, NULL, ?, ?, 1, 'admin', 'default')"
)
INSERT_ATTEMPT = (
    "INSERT INTO job_attempt (job_id, number, worker_id, dispatched_at, started_at, ended_at,"
    " outcome, reason, log_bytes, log_lines_dropped)"
    " VALUES (?, ?, ?, ?, NULL, NULL, NULL, NULL, 0, 0)"
)
INSERT_EVENT = (
    "INSERT INTO job_event (job_id, at, kind, worker_id, attempt, detail) VALUES (?, ?, ?, ?, ?, ?)"
)
INSERT_UPLOAD_TOKEN = (
    "INSERT INTO upload_token (job_id, attempt, token_hash, created_at) VALUES (?, ?, ?, ?)"
)
INSERT_AUDIT = (
    "INSERT INTO audit_event (at, kind, actor, client_address, target, outcome, detail,"
    " prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# The job's updates as tunefleet's compare-and-sets, WHERE clauses and all (SQLite's work).
DISPATCH_JOB = (
    "UPDATE job SET worker_id = ?, attempts = ?, dispatched_at = ?, wait_reason = NULL,"
    " updated_at = ?, state = 'dispatched' WHERE id = ? AND state IN ('pending')"
)
START_JOB = (
    "UPDATE job SET started_at = ?, updated_at = ?, state = 'running'"
    " WHERE id = ? AND state IN ('dispatched')"
)
START_ATTEMPT = (
    "UPDATE job_attempt SET started_at = ? WHERE job_id = ? AND number = ?"
    " AND started_at IS NULL AND ended_at IS NULL"
)
END_JOB = (
    "UPDATE job SET finished_at = ?, error = NULL, progress = NULL, updated_at = ?, state = ?"
    " WHERE id = ? AND state IN ('pending', 'dispatched', 'running')"
)
END_ATTEMPT = (
    "UPDATE job_attempt SET outcome = ?, reason = ?, ended_at = ?"
    " WHERE job_id = ? AND number = ? AND ended_at IS NULL"
)
REQUEUE_JOB = (
    "UPDATE job SET worker_id = NULL, progress = NULL, updated_at = ?, state = 'pending'"
    " WHERE id = ? AND state IN ('dispatched', 'running')"
)
ADMIN_ACTOR = "token:admin"  # who submits, in the audit trail (tunefleet: the API token's name)
UPLOAD_ENDPOINT = "/api/artifacts"  # the job_submit's, as tunefleet sends it
GENESIS_HASH = "0" * 64
# A statement that is an audit event (at, kind, actor, target, detail), not SQL.
AUDIT = "-- audit event"
# tunefleet's canonical JSON (stored text and hashes) and its audit line's encoding.
canonical_json = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode
AUDIT_LINE = json.JSONEncoder(default=str, ensure_ascii=False).encode
Statement = tuple[str, tuple[Any, ...]]
StoredJob = tuple[str, str, str | None, str, int, int]  # id, state, worker, config, gpus, attempts


class Writer:
    """The one thread that writes. ``write`` queues statements and returns a future that
    resolves once they are committed; everything queued meanwhile shares the commit."""

    def __init__(self, path: str, loop: asyncio.AbstractEventLoop, schema: str = SCHEMA) -> None:
        self.loop = loop
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.executescript(schema)
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
                self._commit(group)
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

    def _commit(self, group: list[tuple[list[Statement], asyncio.Future[None]]]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        for statements, _ in group:
            for sql, params in statements:
                self.conn.execute(sql, params)
        self.conn.execute("COMMIT")

    def stop(self) -> None:
        self.queue.put(None)
        self.thread.join(timeout=30)
        self.conn.close()


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for done in futures:
        if not done.done():
            done.set_result(None)


class AuditedWriter(Writer):
    """The writer of ``--records tunefleet``: a statement whose SQL is ``AUDIT`` appends
    an event to the audit hash chain, as tunefleet's AuditRepo.append does (serially, on
    this thread, inside the transaction of the change); the group's audit lines are
    appended to the audit file once it is committed, before anyone is answered."""

    def __init__(self, path: str, loop: asyncio.AbstractEventLoop, audit_path: Path) -> None:
        super().__init__(path, loop, TUNEFLEET_SCHEMA)
        self.conn.execute("PRAGMA foreign_keys=ON")  # as tunefleet opens SQLite
        last = self.conn.execute("SELECT hash FROM audit_event ORDER BY id DESC LIMIT 1")
        self.chain_head: str = (last.fetchone() or (GENESIS_HASH,))[0]
        self.audit_file = audit_path.open("a", encoding="utf-8")

    def _commit(self, group: list[tuple[list[Statement], asyncio.Future[None]]]) -> None:
        head, lines = self.chain_head, list[str]()
        execute = self.conn.execute
        execute("BEGIN IMMEDIATE")
        for statements, _ in group:
            for sql, params in statements:
                if sql is AUDIT:
                    head = self._append_audit(head, params, lines)
                else:
                    execute(sql, params)
        execute("COMMIT")
        # A failed commit ends the process (Writer._run): the head only moves on success.
        # So does a failed line write (tunefleet logs it and goes on): the yardstick
        # need not go on without its audit file.
        self.chain_head = head
        if lines:  # one write and one flush for the group's lines, as tunefleet
            self.audit_file.write("\n".join(lines) + "\n")
            self.audit_file.flush()

    def _append_audit(self, prev_hash: str, event: tuple[Any, ...], lines: list[str]) -> str:
        at, kind, actor, target, detail = event
        fields = {"at": at, "kind": kind, "actor": actor, "client_address": None,
                  "target": target, "outcome": "success", "detail": detail}  # fmt: skip
        digest = hashlib.sha256((prev_hash + canonical_json(fields)).encode()).hexdigest()
        row = (at, kind, actor, None, target, "success", canonical_json(detail), prev_hash, digest)
        stored = self.conn.execute(INSERT_AUDIT, row)
        timestamp = datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat()
        line = {"timestamp": timestamp.replace("+00:00", "Z"), **fields,
                "id": stored.lastrowid, "hash": digest}  # fmt: skip
        lines.append(AUDIT_LINE(line))
        return digest

    def stop(self) -> None:
        super().stop()
        self.audit_file.close()


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
    name: str | None = None
    attempts: int = 0  # counted by TunefleetRecords only (by default always the first)
    upload_token: str = ""  # TunefleetRecords only


class Records:
    """What is written for each change of a job, by default: the minimal server's own
    row of the job (and the worker's ``current_job_id``), one statement each."""

    def writer(self, path: str, loop: asyncio.AbstractEventLoop) -> Writer:
        return Writer(path, loop)

    def stored_jobs(self, conn: sqlite3.Connection) -> Iterable[StoredJob]:
        """The jobs not ended, in submission order."""
        return conn.execute(
            "SELECT job_id, state, worker_id, config, gpu_count, 1 FROM jobs"
            " WHERE state NOT IN ('completed', 'failed', 'cancelled') ORDER BY rowid"
        )

    def queued(self, job: Job, now: float) -> list[Statement]:
        return [(INSERT_JOBS, (job.job_id, "pending", None, json.dumps(job.config),
                                job.gpu_count, now, now))]  # fmt: skip

    def placed(self, job: Job, now: float, new: bool) -> list[Statement]:
        """``job`` given to its worker: inserted already dispatched when ``new``."""
        first = (
            (INSERT_JOBS, (job.job_id, "dispatched", job.worker_id, json.dumps(job.config),
                            job.gpu_count, now, now))
            if new else
            ("UPDATE jobs SET state='dispatched', worker_id=?, updated_at=? WHERE job_id=?",
             (job.worker_id, now, job.job_id))
        )  # fmt: skip
        return [first, ("UPDATE workers SET current_job_id=? WHERE worker_id=?",
                        (job.job_id, job.worker_id))]  # fmt: skip

    def started(self, job: Job, now: float) -> list[Statement]:
        return [("UPDATE jobs SET state='running', updated_at=? WHERE job_id=?", (now, job.job_id))]

    def ended(self, job: Job, now: float) -> list[Statement]:
        return [
            ("UPDATE jobs SET state=?, updated_at=? WHERE job_id=?", (job.state, now, job.job_id)),
            ("UPDATE workers SET current_job_id=NULL WHERE worker_id=?", (job.worker_id,)),
        ]

    def requeued(self, job: Job, now: float) -> list[Statement]:
        """``job`` taken back from its worker (still named in ``job.worker_id``)."""
        return [
            ("UPDATE jobs SET state='pending', worker_id=NULL WHERE job_id=?", (job.job_id,)),
            ("UPDATE workers SET current_job_id=NULL WHERE worker_id=?", (job.worker_id,)),
        ]


class TunefleetRecords(Records):
    """``--records tunefleet``: for each change, the rows tunefleet stores for it, in one
    transaction as tunefleet's does (its statements, traced on SQLite, in its order)."""

    def __init__(self) -> None:
        self.seq = 0  # the job's submission order (tunefleet's unique job.seq)

    def writer(self, path: str, loop: asyncio.AbstractEventLoop) -> Writer:
        return AuditedWriter(path, loop, Path(path).with_name("audit.jsonl"))

    def stored_jobs(self, conn: sqlite3.Connection) -> Iterable[StoredJob]:
        self.seq = conn.execute("SELECT coalesce(max(seq), 0) FROM job").fetchone()[0]
        return conn.execute(
            "SELECT id, state, worker_id, config, gpu_count, attempts FROM job"
            " WHERE state NOT IN ('completed', 'failed', 'cancelled') ORDER BY seq"
        )

    def queued(self, job: Job, now: float) -> list[Statement]:
        return [
            self._insert(job, now, "no idle worker fits; waiting"),
            self._submitted_event(job, now),
            self._submitted_audit(job, now),
        ]

    def placed(self, job: Job, now: float, new: bool) -> list[Statement]:
        job.attempts += 1
        job.upload_token = f"ut_{secrets.token_urlsafe(32)}"
        token_hash = hashlib.sha256(job.upload_token.encode()).hexdigest()
        first = (
            [self._insert(job, now, None), self._submitted_event(job, now)]
            if new else
            [(DISPATCH_JOB, (job.worker_id, job.attempts, now, now, job.job_id))]
        )  # fmt: skip
        last = [self._submitted_audit(job, now)] if new else []
        return [
            *first,
            (INSERT_ATTEMPT, (job.job_id, job.attempts, job.worker_id, now)),
            (INSERT_UPLOAD_TOKEN, (job.job_id, job.attempts, token_hash, now)),
            (INSERT_EVENT, (job.job_id, now, "dispatched", job.worker_id, job.attempts, "{}")),
            *last,
            (AUDIT, (now, "job.dispatched", "scheduler", job.job_id,
                     {"worker_id": job.worker_id, "attempt": job.attempts})),
        ]  # fmt: skip

    def started(self, job: Job, now: float) -> list[Statement]:
        return [
            (START_JOB, (now, now, job.job_id)),
            (START_ATTEMPT, (now, job.job_id, job.attempts)),
            (INSERT_EVENT, (job.job_id, now, "started", job.worker_id, job.attempts, "{}")),
        ]

    def ended(self, job: Job, now: float) -> list[Statement]:
        return [
            (END_JOB, (now, now, job.state, job.job_id)),
            (END_ATTEMPT, (job.state, None, now, job.job_id, job.attempts)),
            (INSERT_EVENT, (job.job_id, now, job.state, job.worker_id, job.attempts, "{}")),
            (AUDIT, (now, f"job.{job.state}", job.worker_id, job.job_id, {"reason": None})),
        ]

    def requeued(self, job: Job, now: float) -> list[Statement]:
        reason = "the worker registered without it"
        return [
            (REQUEUE_JOB, (now, job.job_id)),
            (END_ATTEMPT, ("lost", reason, now, job.job_id, job.attempts)),
            (INSERT_EVENT, (job.job_id, now, "requeued", job.worker_id, job.attempts,
                            canonical_json({"reason": reason}))),
            (AUDIT, (now, "job.requeued", "supervisor", job.job_id, {"reason": reason})),
        ]  # fmt: skip

    def _insert(self, job: Job, now: float, wait_reason: str | None) -> Statement:
        self.seq += 1
        dispatched_at = None if job.state == "pending" else now
        return (INSERT_JOB, (job.job_id, self.seq, job.name, canonical_json(job.config), "worker",
                             job.gpu_count, job.attempts, job.state, job.worker_id, ADMIN_ACTOR,
                             now, dispatched_at, wait_reason, now))  # fmt: skip

    def _submitted_event(self, job: Job, now: float) -> Statement:
        detail = canonical_json({"by": ADMIN_ACTOR, "target": "worker"})
        return (INSERT_EVENT, (job.job_id, now, "submitted", None, None, detail))

    def _submitted_audit(self, job: Job, now: float) -> Statement:
        detail = {"config_name": None, "target_kind": "worker"}
        return (AUDIT, (now, "job.submitted", ADMIN_ACTOR, job.job_id, detail))


RECORDS: dict[str, type[Records]] = {"minimal": Records, "tunefleet": TunefleetRecords}


class Fleet:
    """All state, in memory, changed only on the event loop; every change is written."""

    def __init__(self, writer: Writer, records: Records) -> None:
        self.db = writer
        self.records = records
        self.workers: dict[str, Worker] = {}
        self.by_token: dict[str, Worker] = {}
        self.jobs: dict[str, Job] = {}
        self.pending: collections.deque[Job] = collections.deque()
        self.idle: dict[str, Worker] = {}  # connected, no job; longest idle first
        self.beats: set[Worker] = set()  # heartbeats not yet written

    def load(self) -> None:
        """What was committed before a restart (before the writer thread starts)."""
        conn = self.db.conn
        for wid, token_hash, name, gpus in conn.execute(
            "SELECT worker_id, token_hash, name, gpu_count FROM workers"
        ):
            self.workers[wid] = self.by_token[token_hash] = Worker(wid, name, gpus)
        for job_id, state, wid, config, gpus, attempts in self.records.stored_jobs(conn):
            job = self.jobs[job_id] = Job(job_id, state, json.loads(config), gpus, wid)
            job.attempts = attempts
            if state == "pending":
                self.pending.append(job)
            else:  # which worker holds which job: from the jobs, whose commits say it
                self.workers[str(wid)].job_id = job_id
                job.event = job_submit(job)

    # --- changes ------------------------------------------------------------------------

    async def place(self, job: Job, worker: Worker, new: bool = False) -> None:
        """Give ``job`` to ``worker`` (off the idle list): write it, then send it. A
        ``new`` job is inserted already dispatched, in one commit."""
        job.state, job.worker_id, worker.job_id = "dispatched", worker.worker_id, job.job_id
        statements = self.records.placed(job, time.time(), new)
        job.event = job_submit(job)
        await self.db.write(*statements)
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

    async def submit(
        self, config: dict[str, Any], gpu_count: int, name: str | None = None
    ) -> dict[str, Any]:
        job = Job(f"job_{secrets.token_hex(8)}", "pending", config, gpu_count, name=name)
        self.jobs[job.job_id] = job
        worker = self.idle_worker_for(job)
        if worker is None:
            self.pending.append(job)
            await self.db.write(*self.records.queued(job, time.time()))
        else:
            # Placed before it is first written: one commit stores it already dispatched.
            await self.place(job, worker, new=True)
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
                statements += self.records.requeued(held, time.time())
                held.state, held.worker_id, worker.job_id = "pending", None, None
                self.pending.appendleft(held)
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
            await self.db.write(*self.records.ended(job, time.time()))
            return True
        if job.state == "dispatched":  # the first report acknowledges the dispatch
            job.state = "running"
            await self.db.write(*self.records.started(job, time.time()))
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
    """The job_submit event as tunefleet sends it (by default the upload fields are
    empty: no artifacts)."""
    return {
        "type": "job_submit",
        "job_id": job.job_id,
        "config": job.config,
        "dataloader": None,
        "provider": None,
        "upload_endpoint": UPLOAD_ENDPOINT if job.upload_token else "",
        "upload_token": job.upload_token,
        "hf_token": None,
        "attempt": job.attempts or 1,
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
    name = body.get("name")
    name = name if isinstance(name, str) else None
    return web.json_response(await request.app[FLEET].submit(config, gpu_count, name))


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


def make_app(
    db_path: str, admin_token: str = ADMIN_TOKEN, records: str = "minimal"
) -> web.Application:
    app = web.Application()
    app[ADMIN] = admin_token
    kept = RECORDS[records]()

    async def lifecycle(app: web.Application) -> Any:
        writer = kept.writer(db_path, asyncio.get_running_loop())
        fleet = app[FLEET] = Fleet(writer, kept)
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
    parser.add_argument(
        "--records",
        choices=sorted(RECORDS),
        default="minimal",
        help="minimal (default): one row per job; tunefleet: the rows tunefleet stores",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    web.run_app(
        make_app(args.db, args.admin_token, args.records),
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        print=None,
        shutdown_timeout=5.0,
    )


if __name__ == "__main__":
    main()
