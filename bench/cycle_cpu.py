"""CPU per job cycle in process: the actors, storage, audit and logging of `throughput`'s
cycle without HTTP, so a saving of a few microseconds is not lost in the noise of a
loaded machine's loopback and a second process.

WORKERS idle workers (in-process streams) and as many submitters, closed loop, on
SQLite: submit, the job_submit read from the worker's stream, `running`, `completed`,
the final report's answer written, and the worker free again before the next submit (as
over HTTP), so each job is placed at submit in one commit. Reports the process's CPU
(every thread), the event loop thread's own and the database thread's own, per cycle,
and the writes per cycle. Run alone with
`python -m bench.cycle_cpu`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from pathlib import Path

import structlog

from bench import Row, row
from bench.fleet_common import pick
from bench.inproc_fleet import connect_worker, in_process_fleet
from tunefleet.actors import messages as m
from tunefleet.actors.fleet import Fleet
from tunefleet.actors.records import JobRecord
from tunefleet.actors.stream import EventQueue
from tunefleet.logging import configure_logging

WORKERS = 20
SECONDS: float = pick(8.0, 3.0)
WARMUP_S = 0.5


def run() -> list[Row]:
    # The server's own logging (INFO, console lines) to a file, as an operator runs it.
    with (
        tempfile.TemporaryDirectory() as data_dir,
        (Path(data_dir) / "server.log").open("w", encoding="utf-8") as server_log,
    ):
        harness_logging = structlog.get_config()
        configure_logging("console", stream=server_log)
        try:
            return asyncio.run(_cycles(Path(data_dir), WORKERS, SECONDS))
        finally:
            # Back to the bench harness's settings (warnings only), not structlog's
            # defaults: the benchmarks after this one would print every info line.
            logging.getLogger().handlers.clear()
            structlog.configure(**harness_logging)


async def _cycles(data_dir: Path, workers: int, seconds: float) -> list[Row]:
    async with in_process_fleet(data_dir) as (fleet, db):
        db_clock = _thread_clock(db.thread_id)
        streams = [
            (f"w{n}", *await connect_worker(fleet, f"w{n}", {"bench": f"w{n}"}))
            for n in range(workers)
        ]
        counted = [0]
        stop = time.perf_counter() + WARMUP_S + seconds
        counting = asyncio.Event()
        loops = [
            asyncio.create_task(_submitter(fleet, name, wid, queue, stop, counting, counted))
            for name, wid, queue in streams
        ]
        await asyncio.sleep(WARMUP_S)
        counting.set()
        cpu0, loop0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
        db0, writes0 = time.clock_gettime(db_clock), db.stats.writes
        await asyncio.gather(*loops)
        cpu, loop_cpu = time.process_time() - cpu0, time.thread_time() - loop0
        db_cpu = time.clock_gettime(db_clock) - db0
        writes = db.stats.writes - writes0
        wall = time.perf_counter() - wall0
    cycles = max(1, counted[0])
    load = os.getloadavg()
    note = f"{workers} workers and submitters, SQLite, no HTTP; load avg {load[0]:.1f}"
    return [
        row("cycle CPU, every thread", cpu / cycles * 1e6, "µs", None, note),
        row("cycle CPU, event loop thread", loop_cpu / cycles * 1e6, "µs", None, note),
        row("cycle CPU, database thread", db_cpu / cycles * 1e6, "µs", None, note),
        row("cycles/s in process", cycles / wall, "cycles/s", None, note),
        # 3 when each submit finds its worker free (one commit), 4 when it queues.
        row("writes per cycle", writes / cycles, "writes", None, note),
    ]


def _thread_clock(thread_id: int | None) -> int:
    """The CPU-time clock of the database thread (user and system), read from this one."""
    if thread_id is None:
        raise RuntimeError("the database thread is not running")
    return time.pthread_getcpuclockid(thread_id)


async def _submitter(
    fleet: Fleet,
    name: str,
    worker_id: str,
    stream: EventQueue,
    stop: float,
    counting: asyncio.Event,
    counted: list[int],
) -> None:
    """One submitter paired with one worker: every job it submits fits only that worker."""
    while time.perf_counter() < stop:
        answer = await fleet.submit(_job(name), actor="bench")
        job_id = str(answer["job_id"])
        while (event := await stream.get()) is not None and event.type != "job_submit":
            pass
        for word in ("running", "completed"):
            await fleet.report_status(
                worker_id, job_id, m.StatusReported(worker_id, word, None, None)
            )
        fleet.report_written(worker_id, job_id)
        await _until_free(fleet, worker_id)
        if counting.is_set():
            counted[0] += 1


async def _until_free(fleet: Fleet, worker_id: str) -> None:
    """Let the worker take in that its answer was written, as over HTTP, where the
    submitter hears of the completion only after the worker read that answer. Without
    this the next submit reaches the scheduler first and queues (two commits), which
    `throughput` never does. Bounded: after 1,000 loop turns it submits anyway."""
    worker = fleet.ctx.workers[worker_id]
    for _ in range(1000):
        if worker.schedulable:
            return  # its announcement is queued to the scheduler ahead of the next submit
        await asyncio.sleep(0)


def _job(name: str) -> JobRecord:
    return JobRecord(
        job_id="",
        seq=0,
        state="pending",
        target="worker",
        config={"max_train_steps": 1, "learning_rate": 1e-4, "model": "bench"},
        config_name="bench",
        name="bench",
        command=None,
        worker_labels={"bench": name},
        gpu_count=1,
        min_vram_gb=None,
        gpu_name=None,
        priority=0,
        max_retries=3,
        timeout_minutes=None,
    )


if __name__ == "__main__":
    for line in run():
        print(line)
