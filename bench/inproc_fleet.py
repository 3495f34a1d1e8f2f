"""A fleet in this process, on a fresh SQLite data directory, for the benchmarks that
measure the actors and storage without HTTP (`commit_path`, `cycle_cpu`)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tunefleet.actors import messages as m
from tunefleet.actors.build import build_fleet
from tunefleet.actors.clock import RealClock
from tunefleet.actors.context import FleetSettings
from tunefleet.actors.fleet import Fleet
from tunefleet.actors.stream import EventQueue
from tunefleet.audit import AuditLog
from tunefleet.storage.database import Database, open_database
from tunefleet.storage.store import Store


@asynccontextmanager
async def in_process_fleet(
    data_dir: Path, settings: FleetSettings | None = None
) -> AsyncIterator[tuple[Fleet, Database]]:
    """A started fleet (no local runner unless ``settings`` say) and its database;
    stopped and closed after."""
    clock = RealClock()
    db = await open_database(None, data_dir)
    store = Store(db, now=clock.time)
    audit = AuditLog(store.append_audit, data_dir / "audit.jsonl", clock)
    fleet = build_fleet(store, clock, settings or FleetSettings(local_runner=False), audit)
    await fleet.start()
    try:
        yield fleet, db
    finally:
        await fleet.stop()
        await audit.close()
        await db.close()


async def connect_worker(fleet: Fleet, name: str, labels: dict[str, str]) -> tuple[str, EventQueue]:
    """A persistent one-GPU worker created, registered and streaming, as an agent would
    be: its id and the queue its stream's events arrive on."""
    token_hash = hashlib.sha256(f"bench-{name}".encode()).hexdigest()
    made = await fleet.create_worker(name, "persistent", labels, token_hash, actor="bench")
    worker_id = str(made["worker_id"])
    gpu = {"name": "Bench GPU", "vram_gb": 24.0, "count": 1, "accelerator": "cuda"}
    register = m.Register(
        name=name,
        gpu=gpu,
        persistent=True,
        agent_labels={},
        current_job_id=None,
        provider=None,
        hostname="bench",
        client_address="127.0.0.1",
    )
    await fleet.register(worker_id, register)
    conn = await fleet.open_stream(worker_id, None)
    return worker_id, conn.queue
