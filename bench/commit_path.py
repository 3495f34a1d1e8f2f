"""The durable-write path in process, without HTTP: group commit across concurrent
writers (with and without the database thread's linger), and one job cycle through the
Fleet (submit to the job_submit on an idle worker's stream, acknowledgement, end).

`run()` returns rows {name, value, unit, target, note}; bench/__main__.py collects them.
Numbers, never assertions. Run alone with `python -m bench.commit_path`.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from bench import Row, row
from bench.inproc_fleet import connect_worker, in_process_fleet
from tunefleet.actors import messages as m
from tunefleet.actors.records import JobRecord
from tunefleet.storage.database import DEFAULT_LINGER_S, open_database
from tunefleet.storage.models import database_proxy

WRITERS = (1, 8, 50)
WRITE_SECONDS = 2.0
REQUEST_CPU_US = 400  # the event loop's own work per request, before its write
CYCLES = 200


def run() -> list[Row]:
    rows: list[Row] = []
    for writers in WRITERS:
        for linger_s in (0.0, DEFAULT_LINGER_S):
            rows += asyncio.run(_concurrent_writes(writers, linger_s))
    rows += asyncio.run(_job_cycles(CYCLES))
    return rows


def _spin(microseconds: float) -> None:
    end = time.perf_counter() + microseconds / 1e6
    while time.perf_counter() < end:
        pass


async def _concurrent_writes(writers: int, linger_s: float) -> list[Row]:
    with tempfile.TemporaryDirectory() as data_dir:
        db = await open_database(None, Path(data_dir), linger_s=linger_s)
        try:
            await db.write(lambda: database_proxy.execute_sql("CREATE TABLE t (x INTEGER)"))
            stop = time.perf_counter() + WRITE_SECONDS
            latencies: list[float] = []

            async def request() -> None:
                while time.perf_counter() < stop:
                    _spin(REQUEST_CPU_US)
                    started = time.perf_counter()
                    await db.write(lambda: database_proxy.execute_sql("INSERT INTO t VALUES (1)"))
                    latencies.append(time.perf_counter() - started)

            before, started = db.stats, time.perf_counter()
            await asyncio.gather(*(request() for _ in range(writers)))
            elapsed, after = time.perf_counter() - started, db.stats
        finally:
            await db.close()
    writes = after.writes - before.writes
    groups = max(1, after.write_groups - before.write_groups)
    name = f"{writers} writers, linger {linger_s * 1e6:.0f} us"
    note = f"{after.lingers - before.lingers} lingers; {REQUEST_CPU_US} us loop CPU per write"
    return [
        row(f"{name}: writes/s", writes / elapsed, "writes/s", None, note),
        row(f"{name}: writes per commit", writes / groups, "writes", None, note),
        row(f"{name}: write p50", _pct(latencies, 0.5) * 1e3, "ms", None, "queued to durable"),
    ]


async def _job_cycles(cycles: int) -> list[Row]:
    with tempfile.TemporaryDirectory() as data_dir:
        async with in_process_fleet(Path(data_dir)) as (fleet, db):
            worker_id, events = await connect_worker(fleet, "w", {})
            dispatch, answer, writes = [], [], []
            for _ in range(cycles):
                before, started = db.stats.writes, time.perf_counter()
                submit = asyncio.ensure_future(fleet.submit(_job(), actor="bench"))
                while (event := await events.get()) is not None and event.type != "job_submit":
                    pass
                dispatch.append(time.perf_counter() - started)
                job_id = str((await submit)["job_id"])
                answer.append(time.perf_counter() - started)
                for word in ("running", "completed"):
                    await fleet.report_status(
                        worker_id, job_id, m.StatusReported(worker_id, word, None, None)
                    )
                fleet.report_written(worker_id, job_id)
                await asyncio.sleep(0.005)  # the worker's own row is written after the end
                writes.append(db.stats.writes - before)
    note = f"{cycles} cycles, one idle worker, SQLite, no HTTP"
    return [
        row("cycle: dispatch p50", _pct(dispatch, 0.5) * 1e3, "ms", None, "submit → job_submit"),
        row("cycle: dispatch p99", _pct(dispatch, 0.99) * 1e3, "ms", None, note),
        row("cycle: submit answer p50", _pct(answer, 0.5) * 1e3, "ms", None, note),
        row("cycle: writes per job cycle", sum(writes) / len(writes), "writes", None, note),
    ]


def _job() -> JobRecord:
    return JobRecord(
        job_id="",
        seq=0,
        state="pending",
        target="worker",
        config={"max_train_steps": 1},
        config_name="bench",
        name="bench",
        command=None,
        worker_labels={},
        gpu_count=1,
        min_vram_gb=None,
        gpu_name=None,
        priority=0,
        max_retries=3,
        timeout_minutes=None,
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if ordered else 0.0


if __name__ == "__main__":
    for line in run():
        print(line)
