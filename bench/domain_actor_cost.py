"""What the orchestrator's own actors cost: bytes per idle worker actor and per pending
job actor (bench/actor_cost.py measures the bare runtime).

A worker actor is measured as a registered, idle worker looks: its record filled in by
a registration, its heartbeat deadline armed, its entry in the fleet's map. A job
actor as a submitted job waits: its record with a small configuration, its entry in the
fleet's map and its place in the scheduler's pending set. Bytes come from tracemalloc
(Python allocations) and, in a fresh child process, from RSS growth.
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import Row, row
from tunefleet.actors import messages as m
from tunefleet.actors.build import build_fleet
from tunefleet.actors.clock import RealClock
from tunefleet.actors.context import FleetContext, FleetSettings
from tunefleet.actors.job_actor import JobActor
from tunefleet.actors.records import JobRecord, WorkerRecord
from tunefleet.actors.worker_actor import WorkerActor
from tunefleet.audit import AuditLog
from tunefleet.fsm.worker import WorkerState
from tunefleet.storage.memory import memory_store

COUNT = 10_000
# Never written: idle actors record no audit event.
AUDIT_FILE = "tunefleet-domain-actor-cost-audit.jsonl"
# A small but real training configuration: what a job actor carries.
CONFIG: dict[str, Any] = {
    "model_type": "lora",
    "model_family": "flux",
    "pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev",
    "output_dir": "output/models",
    "train_batch_size": 1,
    "learning_rate": 1e-4,
    "max_train_steps": 1000,
    "checkpointing_steps": 250,
    "resolution": 1024,
    "mixed_precision": "bf16",
}


async def _context() -> FleetContext:
    """A started fleet, wired as the server wires its own, over the in-memory store: idle
    actors write nothing, so no database adds to what is measured."""
    clock = RealClock()
    store = memory_store(clock.time)
    audit = AuditLog(store.append_audit, Path(tempfile.gettempdir()) / AUDIT_FILE, clock)
    fleet = build_fleet(store, clock, FleetSettings(), audit)
    await fleet.start()
    return fleet.ctx


def _worker_record(i: int) -> WorkerRecord:
    now = time.time()
    return WorkerRecord(
        worker_id=f"w_{i:012x}",
        name=f"gpu-worker-{i}",
        worker_type="persistent",
        state=WorkerState.IDLE,
        gpu_info={
            "name": "NVIDIA A100-SXM4-80GB",
            "vram_gb": 80,
            "count": 8,
            "accelerator": "cuda",
        },
        gpu_count=8,
        gpu_name="NVIDIA A100-SXM4-80GB",
        gpu_vram_gb=80.0,
        accelerator_type="cuda",
        persistent_agent=True,
        hostname=f"node-{i}",
        client_address="10.0.0.1",
        gpu_utilization=[0.0] * 8,
        vram_used_gb=[0.0] * 8,
        last_heartbeat_at=now,
        connected_at=now,
        last_seen_at=now,
        created_at=now,
    )


def _job_record(i: int) -> JobRecord:
    return JobRecord(
        job_id=f"j_{i:016x}",
        seq=i + 1,
        state="pending",
        target="worker",
        config=dict(CONFIG),
        config_name="flux-lora",
        name="flux-lora",
        gpu_count=1,
        submitted_by="token:ci#1",
        submitted_at=time.time(),
    )


async def _spawn_workers(ctx: FleetContext, count: int) -> list[WorkerActor]:
    actors = []
    for i in range(count):
        actor = WorkerActor(ctx, _worker_record(i))
        ctx.workers[actor.worker_id] = actor
        actors.append(ctx.system.spawn(actor))
        ctx.scheduler.tell(m.WorkerChanged(actor.worker_id, actor.view(), schedulable=True))
    # on_start arms each heartbeat deadline; the scheduler files each worker as idle.
    await _settle(lambda: all(a.heartbeat.deadline is not None for a in actors))
    await _settle(lambda: ctx.scheduler.mailbox_size == 0)
    return actors


async def _spawn_jobs(ctx: FleetContext, count: int) -> list[JobActor]:
    actors = []
    for i in range(count):
        actor = JobActor(ctx, _job_record(i))
        ctx.jobs[actor.job_id] = actor
        ctx.system.spawn(actor)
        ctx.scheduler.tell(m.JobWaiting(actor.pending_view()))
        actors.append(actor)
    await _settle(lambda: ctx.scheduler.mailbox_size == 0)  # filed as pending
    return actors


async def _settle(done: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError("actors did not settle")
        await asyncio.sleep(0.01)


async def _traced(kind: str, count: int = COUNT) -> float:
    ctx = await _context()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = await (_spawn_workers if kind == "worker" else _spawn_jobs)(ctx, count)
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    if kind == "job" and len(ctx.scheduler.pending) != count:
        raise RuntimeError(f"scheduler holds {len(ctx.scheduler.pending)} of {count} jobs")
    del made
    await ctx.system.stop_all(drain=False)
    return used / count


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        import os

        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def _rss_main(kind: str) -> float:
    ctx = await _context()
    gc.collect()
    before = _rss()
    made = await (_spawn_workers if kind == "worker" else _spawn_jobs)(ctx, COUNT)
    gc.collect()
    used = _rss() - before
    del made
    await ctx.system.stop_all(drain=False)
    return used / COUNT


def rss_probe(kind: str) -> None:
    """Child process entry: a fresh interpreter has no freed memory to reuse."""
    print(json.dumps({"bytes": asyncio.run(_rss_main(kind))}))


def _rss_in_child(kind: str) -> float | None:
    if not Path("/proc/self/statm").exists():
        return None
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from bench.domain_actor_cost import rss_probe; rss_probe({kind!r})",
        ],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return float(json.loads(child.stdout.strip().splitlines()[-1])["bytes"])


def run() -> list[Row]:
    rows: list[Row] = []
    for kind, what in (("worker", "idle worker actor"), ("job", "pending job actor")):
        traced = asyncio.run(_traced(kind))
        rss = _rss_in_child(kind)
        note = f"{COUNT:,} of them; actor, record, fleet map entry, scheduler entry" + (
            ", heartbeat deadline" if kind == "worker" else f", a {len(CONFIG)}-key config"
        )
        rows.append(row(f"{what} (tracemalloc)", round(traced), "B", None, note))
        if rss is not None:
            rows.append(row(f"{what} (RSS, fresh process)", round(rss), "B", None, note))
    return rows
