"""Metric history: what storing each progress report's numbers costs the DB thread.

In process, on the orchestrator's own storage path (Store and Persistence over a real
SQLite file or PostgreSQL schema), without HTTP:

- Progress writes with and without the metric point, closed loop with one report in
  flight per running job (the actor waits for its write), as the orchestrator groups
  them: the difference is what the history adds to each report, and the rate is the
  ceiling. A realistic fleet sends far fewer (200 jobs at one report a second: 200/s).
- One attempt of 100,000 steps reported one by one: the rows it leaves (the bound), the
  DB time per report, mean and worst (a report that thins the history is the worst),
  and the table's size.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

from bench import Row, row
from bench.fleet_common import backends, machine_note, pick, save_raw
from bench.orchestrator_proc import postgres_schema
from tunefleet.actors.persistence import Persistence
from tunefleet.storage.database import open_database
from tunefleet.storage.models import database_proxy
from tunefleet.storage.store import Repos, Store
from tunefleet.storage.store_metrics import MAX_POINTS_PER_ATTEMPT, metric_point

JOBS: int = pick(200, 50)
REPORTS_PER_JOB: int = pick(50, 20)
LONG_RUN_STEPS: int = pick(100_000, 20_000)
REALISTIC_RATE = 200.0  # reports/s: 200 running jobs, one report a second each


def run() -> list[Row]:
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for backend in backends():
        result = asyncio.run(_measure(backend))
        raw[backend] = result
        rows += _rows(backend, result)
    save_raw("metric_history", raw)
    return rows


async def _measure(backend: str) -> dict[str, Any]:
    async with _store(backend) as store:
        persistence = Persistence(store)
        job_ids = [f"j_bench_{i:04}" for i in range(JOBS)]
        for job_id in job_ids:
            await store.create_job(job_id, config={})
        without = await _closed_loop(job_ids, lambda j, s: _progress(persistence, j, s, False))
        with_point = await _closed_loop(job_ids, lambda j, s: _progress(persistence, j, s, True))
        long_run = await _long_run(store)
    return {"without": without, "with": with_point, "long_run": long_run}


@contextlib.asynccontextmanager
async def _store(backend: str) -> AsyncIterator[Store]:
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as data_dir:
        if backend == "sqlite":
            db = await open_database(None, Path(data_dir))
            try:
                yield Store(db)
            finally:
                await db.close()
            return
        with postgres_schema() as url:
            db = await open_database(url, Path(data_dir))
            try:
                yield Store(db)
            finally:
                await db.close()


async def _progress(persistence: Persistence, job_id: str, step: int, point: bool) -> None:
    report = {"step": step, "total": 10_000, "loss": 1.0 / (step + 1), "lr": 1e-4, "epoch": 0.1}
    await persistence.save_progress(
        job_id, report, time.time(), attempt=1 if point else 0, reported=report
    )


async def _closed_loop(
    job_ids: list[str], report: Callable[[str, int], Coroutine[Any, Any, None]]
) -> dict[str, float]:
    """Every job reports REPORTS_PER_JOB steps, one at a time, all jobs at once."""
    base = int(time.time() * 1000) % 1_000_000  # fresh steps for each loop

    async def one_job(job_id: str) -> None:
        for i in range(REPORTS_PER_JOB):
            await report(job_id, base + i)

    started = time.perf_counter()
    await asyncio.gather(*(one_job(job_id) for job_id in job_ids))
    elapsed = time.perf_counter() - started
    reports = len(job_ids) * REPORTS_PER_JOB
    return {"reports": reports, "seconds": elapsed, "rate": reports / elapsed}


async def _long_run(store: Store) -> dict[str, Any]:
    """One attempt reported step by step, timed on the DB thread (a thousand reports per
    transaction, so the disk's sync time does not hide what the history costs)."""
    job_id = "j_bench_long"
    await store.create_job(job_id, config={})
    latencies: list[float] = []

    def chunk(repos: Repos, first: int) -> None:
        for step in range(first, min(first + 1000, LONG_RUN_STEPS)):
            report = {"step": step, "loss": 1.0 / (step + 1), "lr": 1e-4, "epoch": step / 1000}
            started = time.perf_counter()
            repos.jobs.update(job_id, progress=report)
            repos.metrics.append(job_id, 1, step, metric_values(report), time.time())
            latencies.append(time.perf_counter() - started)

    for first in range(0, LONG_RUN_STEPS, 1000):
        await store.atomically(lambda repos, first=first: chunk(repos, first))
    points = await store.read_metrics(job_id)
    size = await store.db.read(lambda: _table_bytes(store.db.backend))
    return {
        "steps": LONG_RUN_STEPS,
        "rows": len(points),
        "mean_us": statistics.fmean(latencies) * 1e6,
        "p99_us": sorted(latencies)[int(len(latencies) * 0.99)] * 1e6,
        "max_ms": max(latencies) * 1e3,
        "table_bytes": size,
    }


def metric_values(report: dict[str, Any]) -> dict[str, float]:
    point = metric_point(report)
    assert point is not None
    return point[1]


def _table_bytes(backend: str) -> int | None:
    """The job_metric table with its indexes (SQLite: dbstat, when compiled in)."""
    if backend == "postgresql":
        sql = "SELECT pg_total_relation_size('job_metric')"
    else:
        sql = (
            "SELECT SUM(pgsize) FROM dbstat WHERE name = 'job_metric' "
            "OR name IN (SELECT name FROM sqlite_master WHERE tbl_name = 'job_metric')"
        )
    try:
        value = database_proxy.execute_sql(sql).fetchone()[0]
    except Exception:  # dbstat is optional in SQLite builds
        return None
    return int(value) if value is not None else None


def _rows(backend: str, result: dict[str, Any]) -> list[Row]:
    without, with_point, long_run = result["without"], result["with"], result["long_run"]
    added_us = (1 / with_point["rate"] - 1 / without["rate"]) * 1e6
    share = REALISTIC_RATE / with_point["rate"] * 100
    loop = f"{JOBS} jobs x {REPORTS_PER_JOB} reports, one in flight per job; {machine_note()}"
    bound = f"bound {MAX_POINTS_PER_ATTEMPT} points per attempt"
    size = long_run["table_bytes"]
    rows = [
        row(
            f"{backend} progress writes, no history",
            round(without["rate"], 1),
            "reports/s",
            None,
            loop,
        ),
        row(
            f"{backend} progress writes with history",
            round(with_point["rate"], 1),
            "reports/s",
            f">= {REALISTIC_RATE:.0f}/s",
            loop,
        ),
        row(
            f"{backend} history's cost per report",
            round(added_us, 1),
            "us",
            None,
            "DB time the point adds to a report (1/rate with - 1/rate without)",
        ),
        row(
            f"{backend} DB share at {REALISTIC_RATE:.0f} reports/s",
            round(share, 1),
            "%",
            "< 10 %",
            "of the DB thread's capacity for these writes",
        ),
        row(
            f"{backend} {long_run['steps']}-step attempt rows",
            long_run["rows"],
            "rows",
            f"<= {MAX_POINTS_PER_ATTEMPT}",
            bound,
        ),
        row(
            f"{backend} {long_run['steps']}-step attempt, DB time per report",
            round(long_run["mean_us"], 1),
            "us",
            None,
            "progress + point, 1,000 reports per commit",
        ),
        row(
            f"{backend} {long_run['steps']}-step attempt, p99 per report",
            round(long_run["p99_us"], 1),
            "us",
            None,
            "",
        ),
        row(
            f"{backend} {long_run['steps']}-step attempt, slowest report",
            round(long_run["max_ms"], 2),
            "ms",
            None,
            "a report that thins the history",
        ),
    ]
    if size is not None:
        rows.append(
            row(
                f"{backend} job_metric table with indexes",
                round(size / 1024, 1),
                "KiB",
                None,
                f"after the {long_run['steps']}-step attempt and the loops",
            )
        )
    return rows
