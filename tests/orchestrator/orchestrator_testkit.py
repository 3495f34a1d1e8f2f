"""Drive a real Fleet (actors, store, audit, metrics) without HTTP.

``FleetHarness`` builds its Fleet with ``build_fleet``, as tunefleet/http/app.py does,
on a ``SettlingClock``: a FakeClock that, after each timer it fires, waits until every
other task (actors awaiting the store included) has finished, so a chain of effects
(heartbeat expiry → worker lost → job requeued → dispatched again) completes before the
next timer fires, exactly as it would in real time.

``FakeAgent`` plays a worker agent through Fleet's methods: register, open the stream
(events are read from the StreamConnection's queue), heartbeats and status reports.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from tunefleet.actors import messages as m
from tunefleet.actors.build import build_fleet
from tunefleet.actors.clock import Clock, FakeClock
from tunefleet.actors.context import FleetContext, FleetSettings
from tunefleet.actors.fleet import Fleet
from tunefleet.actors.job_actor import JobActor
from tunefleet.actors.records import JobRecord, WorkerRecord
from tunefleet.actors.stream import StreamConnection, StreamEvent
from tunefleet.actors.worker_actor import WorkerActor
from tunefleet.audit import AuditLog
from tunefleet.storage.database import Database, open_database
from tunefleet.storage.memory import memory_store
from tunefleet.storage.memory_tables import MemoryDatabase
from tunefleet.storage.rows import JobAttemptRow, JobEventRow, JobRow
from tunefleet.storage.store import Store

SETTLE_LIMIT_S = 10.0
# Where a harness keeps its rows: a SQLite file (restarts), or the in-memory store.
Storage = Literal["sqlite", "memory"]


async def settle(limit_s: float = SETTLE_LIMIT_S) -> None:
    """Wait until no task but the caller's is pending (actors idle, DB replies delivered).

    An idle actor owns no task, so "no other task" means every mailbox is empty and no
    handler is waiting on the DB thread. Not for fleets with long-lived tasks (a local
    runner): those tests use the real clock and ``eventually``.
    """
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    deadline = loop.time() + limit_s
    quiet_rounds = 0
    spins = 0
    while quiet_rounds < 3:
        busy = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        if busy:
            quiet_rounds = 0
            spins += 1
            if loop.time() > deadline:
                raise AssertionError(f"the fleet did not settle within {limit_s} s: {busy}")
            # A few free turns first; then yield the CPU to the DB thread.
            await asyncio.sleep(0 if spins < 20 else 0.0005)
        else:
            quiet_rounds += 1
            await asyncio.sleep(0)


class SettlingClock(FakeClock):
    """A FakeClock whose advance lets the whole fleet settle after each timer fires."""

    async def _settle(self) -> None:
        await super()._settle()
        await settle()


async def eventually(
    predicate: Callable[[], object], what: str, timeout_s: float = 10.0, poll_s: float = 0.01
) -> None:
    """Poll ``predicate`` until true (real time); fail naming ``what`` otherwise."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(poll_s)


def token_hash(name: str) -> str:
    return hashlib.sha256(f"wt_{name}".encode()).hexdigest()


def job_record(
    *,
    target: str = "worker",
    gpu_count: int = 1,
    labels: dict[str, str] | None = None,
    min_vram_gb: float | None = None,
    gpu_name: str | None = None,
    priority: int = 0,
    max_retries: int = 3,
    timeout_minutes: float | None = None,
    config: dict[str, Any] | None = None,
    command: list[str] | None = None,
) -> JobRecord:
    """What the submit handler builds; Fleet.submit fills id, seq, state and times."""
    return JobRecord(
        job_id="",
        seq=0,
        state="pending",
        target=target,
        config=dict(config or {"max_train_steps": 1}),
        config_name="test-config",
        name="test-job",
        command=command,
        worker_labels=dict(labels or {}),
        gpu_count=gpu_count,
        min_vram_gb=min_vram_gb,
        gpu_name=gpu_name,
        priority=priority,
        max_retries=max_retries,
        timeout_minutes=timeout_minutes,
    )


def gpu_report(
    count: int = 1, vram_gb: float = 80.0, name: str = "NVIDIA A100-SXM4-80GB"
) -> dict[str, Any]:
    return {"name": name, "vram_gb": vram_gb, "count": count, "accelerator": "cuda"}


@dataclass
class FleetHarness:
    data_dir: Path
    clock: Clock
    settings: FleetSettings
    db: Database | MemoryDatabase
    store: Store
    audit: AuditLog
    ctx: FleetContext
    fleet: Fleet
    closed: bool = False
    successor: FleetHarness | None = None  # the orchestrator started by restart()

    @classmethod
    async def open(
        cls,
        data_dir: Path,
        clock: Clock,
        settings: FleetSettings | None = None,
        local_worker: WorkerRecord | None = None,
        *,
        storage: Storage = "sqlite",
    ) -> FleetHarness:
        """A started fleet over a SQLite file in ``data_dir``, or over the in-memory store
        (nothing to restart from then)."""
        settings = settings or FleetSettings()
        db: Database | MemoryDatabase
        if storage == "memory":
            store = memory_store(clock.time)
            db = cast(MemoryDatabase, store.db)
        else:
            db = await open_database(None, data_dir)
            store = Store(db, now=clock.time)
        audit = AuditLog(store.append_audit, data_dir / "audit.jsonl", clock)
        fleet = build_fleet(store, clock, settings, audit)
        await fleet.start(local_worker=local_worker)
        harness = cls(data_dir, clock, settings, db, store, audit, fleet.ctx, fleet)
        await harness.settle()
        return harness

    async def close(self) -> None:
        """Stop the actors, flush the audit log and close the database (a clean shutdown)."""
        if self.closed:
            return
        self.closed = True
        await self.fleet.stop()
        await self.audit.close()
        await self.db.close()

    async def close_all(self) -> None:
        """Close this orchestrator and every one restarted from it."""
        harness: FleetHarness | None = self
        while harness is not None:
            await harness.close()
            harness = harness.successor

    async def settle(self) -> None:
        await settle()

    async def restart(self, downtime_s: float = 5.0, *agents: FakeAgent) -> FleetHarness:
        """Stop this orchestrator and start a new one on the same database file, as a new
        process would: a fresh clock (monotonic time starts over), fresh actors. The
        given agents are pointed at the new one (their streams were closed)."""
        if isinstance(self.db, MemoryDatabase):
            raise TypeError("restart needs the SQLite store: nothing in memory outlives it")
        await self.close()
        clock = SettlingClock(start=self.clock.time() + downtime_s)
        new = await FleetHarness.open(self.data_dir, clock, self.settings)
        self.successor = new
        for agent in agents:
            agent.harness = new
            agent.read()
            agent.conn = None
        return new

    async def advance(self, seconds: float) -> None:
        if not isinstance(self.clock, FakeClock):
            raise TypeError("advance needs a FakeClock")
        await self.clock.advance(seconds)
        await self.settle()

    # --- workers and agents ------------------------------------------------------------

    async def create_worker(
        self, name: str, worker_type: str = "persistent", labels: dict[str, str] | None = None
    ) -> str:
        snapshot = await self.fleet.create_worker(
            name, worker_type, dict(labels or {}), token_hash(name), actor="admin"
        )
        return str(snapshot["worker_id"])

    async def agent(
        self,
        name: str,
        *,
        worker_type: str = "persistent",
        labels: dict[str, str] | None = None,
        gpu: dict[str, Any] | None = None,
        agent_labels: dict[str, str] | None = None,
        connect: bool = True,
    ) -> FakeAgent:
        """A created worker whose agent has registered and (by default) opened its stream."""
        worker_id = await self.create_worker(name, worker_type, labels)
        agent = FakeAgent(self, worker_id, name, gpu or gpu_report(), agent_labels or {})
        await agent.register()
        if connect:
            await agent.connect()
        await self.settle()
        return agent

    def worker(self, worker_id: str) -> WorkerActor:
        return self.ctx.workers[worker_id]

    def worker_state(self, worker_id: str) -> str:
        return str(self.ctx.workers[worker_id].state)

    # --- jobs -----------------------------------------------------------------------

    async def submit(self, rec: JobRecord | None = None, **kwargs: Any) -> str:
        reply = await self.fleet.submit(rec or job_record(**kwargs), actor="tester")
        await self.settle()
        return str(reply["job_id"])

    async def running_job(self, **kwargs: Any) -> tuple[FakeAgent, str]:
        """Worker "w1"'s agent, running the one job submitted (with `kwargs`)."""
        agent = await self.agent("w1")
        job_id = await self.submit(**kwargs)
        await agent.report(job_id, "running")
        return agent, job_id

    def job_actor(self, job_id: str) -> JobActor | None:
        return self.ctx.jobs.get(job_id)

    async def job(self, job_id: str) -> JobRow:
        row = await self.store.get_job(job_id)
        if row is None:
            raise AssertionError(f"job {job_id} is not stored")
        return row

    async def job_state(self, job_id: str) -> str:
        return (await self.job(job_id)).state

    async def attempts(self, job_id: str) -> list[JobAttemptRow]:
        return await self.store.list_attempts(job_id)

    async def timeline(self, job_id: str) -> list[JobEventRow]:
        return await self.store.list_job_events(job_id)

    async def timeline_kinds(self, job_id: str) -> list[str]:
        return [event.kind for event in await self.timeline(job_id)]


@dataclass
class FakeAgent:
    """A worker agent speaking to the Fleet directly, as the HTTP handlers would."""

    harness: FleetHarness
    worker_id: str
    name: str
    gpu: dict[str, Any]
    agent_labels: dict[str, str]
    persistent: bool = True
    conn: StreamConnection | None = None
    events: list[StreamEvent] = field(default_factory=list)
    stream_closed: bool = False

    @property
    def fleet(self) -> Fleet:
        return self.harness.fleet

    async def register(self, current_job_id: str | None = None) -> dict[str, Any]:
        return await self.fleet.register(
            self.worker_id,
            m.Register(
                name=self.name,
                gpu=dict(self.gpu),
                persistent=self.persistent,
                agent_labels=dict(self.agent_labels),
                current_job_id=current_job_id,
                provider=None,
                hostname=f"{self.name}.test",
                client_address="127.0.0.1",
            ),
        )

    async def connect(self, last_event_id: int | None = None) -> StreamConnection:
        self.conn = await self.fleet.open_stream(self.worker_id, last_event_id)
        self.stream_closed = False
        return self.conn

    def close_stream(self) -> None:
        """The agent's stream dropped (the HTTP handler's finally)."""
        if self.conn is not None:
            self.fleet.close_stream(self.worker_id, self.conn)
            self.conn = None

    def read(self) -> list[StreamEvent]:
        """Take what the stream holds now (never waits); remember it in ``events``."""
        fresh: list[StreamEvent] = []
        conn = self.conn
        while conn is not None and not conn.queue.empty():
            event = conn.queue.get_nowait()
            if event is None:
                self.stream_closed = True
                break
            fresh.append(event)
        self.events.extend(fresh)
        return fresh

    def forget(self) -> None:
        """Lose what the stream delivered so far (it never reached the agent)."""
        self.read()
        self.events.clear()

    def received(self, type_: str) -> list[StreamEvent]:
        self.read()
        return [e for e in self.events if e.type == type_]

    def submitted_jobs(self) -> list[str]:
        return [str(e.data["job_id"]) for e in self.received("job_submit")]

    @property
    def last_event_id(self) -> int | None:
        ids = [e.event_id for e in self.events if e.event_id is not None]
        return max(ids) if ids else None

    async def heartbeat(
        self, current_job_id: str | None = None, progress: dict[str, Any] | None = None
    ) -> bool:
        return await self.fleet.heartbeat(
            self.worker_id,
            m.HeartbeatReceived(
                status="busy" if current_job_id else "idle",
                current_job_id=current_job_id,
                job_progress=progress,
                gpu_utilization=[50.0],
                vram_used_gb=[10.0],
            ),
        )

    async def report(
        self,
        job_id: str,
        status: str,
        progress: dict[str, Any] | None = None,
        error: str | None = None,
        *,
        written: bool = True,
    ) -> dict[str, Any]:
        """A status report; ``written=False`` leaves the response unconfirmed (report hold)."""
        reply = await self.fleet.report_status(
            self.worker_id, job_id, m.StatusReported(self.worker_id, status, progress, error)
        )
        if written and reply.get("release_hold"):
            self.fleet.report_written(self.worker_id, job_id)
        await self.harness.settle()
        return reply

    async def run_to_completion(self, job_id: str) -> None:
        await self.report(job_id, "starting")
        await self.report(job_id, "running", {"step": 1, "total": 1})
        await self.report(job_id, "completed", {"step": 1, "total": 1})

    async def rejoin_and_run_pushed_job(self, job_id: str) -> None:
        """After a restart, an agent that never got `job_id` registers holding nothing:
        it is told neither to resume nor to abandon, gets the job pushed again on its new
        stream, and runs it to completion on the job's first attempt."""
        # The kit's asserts are not rewritten by pytest: each says what it saw.
        reply = await self.register(current_job_id=None)
        told = (reply["resume_job"], reply["abandon_job"])
        assert told == (None, None), f"(resume_job, abandon_job) = {told}"
        await self.connect(None)
        await self.harness.settle()
        pushed = self.submitted_jobs()
        assert pushed == [job_id], f"pushed {pushed}, expected [{job_id!r}]"
        await self.run_to_completion(job_id)
        job = await self.harness.job(job_id)
        ended = (job.state, job.attempts)
        assert ended == ("completed", 1), f"(state, attempts) = {ended}"

    async def disconnect(self) -> None:
        self.close_stream()
        await self.fleet.disconnect(self.worker_id)
        await self.harness.settle()
