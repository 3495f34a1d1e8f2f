"""Queued submissions: what a submission costs when no worker is free for it.

WORKERS workers in process (no HTTP, SQLite), each given one job it never finishes, then
as many concurrent submitters each submitting PER_SUBMITTER jobs that only a busy worker
fits: every submission queues behind the ones before it (a backlog of up to 2,000 jobs)
and is answered "pending", its queue position and its wait reason. Reports CPU (every
thread) and writes per submission. Run alone with `python -m bench.queued_submit`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from pathlib import Path

from bench import Row, row
from bench.cycle_cpu import _job
from bench.fleet_common import pick
from bench.inproc_fleet import connect_worker, in_process_fleet
from tunefleet.actors.fleet import Fleet

WORKERS = 20
PER_SUBMITTER: int = pick(100, 25)


def run() -> list[Row]:
    logging.disable(logging.INFO)  # the server's INFO lines: not what this measures
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            return asyncio.run(_submissions(Path(data_dir), WORKERS, PER_SUBMITTER))
    finally:
        logging.disable(logging.NOTSET)


async def _submissions(data_dir: Path, workers: int, per_submitter: int) -> list[Row]:
    async with in_process_fleet(data_dir) as (fleet, db):
        names = [f"w{n}" for n in range(workers)]
        for name in names:
            await connect_worker(fleet, name, {"bench": name})
            answer = await fleet.submit(_job(name), actor="bench")
            if answer["status"] != "dispatched":
                raise RuntimeError(f"the worker's first job was not dispatched: {answer}")
        before, cpu0, wall0 = db.stats, time.process_time(), time.perf_counter()
        queued = await asyncio.gather(*(_submitter(fleet, name, per_submitter) for name in names))
        cpu, wall, after = time.process_time() - cpu0, time.perf_counter() - wall0, db.stats
    count = workers * per_submitter
    if sum(queued) != count:
        raise RuntimeError(f"{count - sum(queued)} submissions were not answered pending")
    note = (
        f"{workers} busy workers, {workers} submitters, a backlog growing to {count} jobs; "
        f"SQLite, no HTTP; load avg {os.getloadavg()[0]:.1f}"
    )
    return [
        row("queued submission CPU, every thread", cpu / count * 1e6, "µs", None, note),
        row("writes per queued submission", (after.writes - before.writes) / count, "", None, note),
        row("queued submissions/s in process", count / wall, "submits/s", None, note),
    ]


async def _submitter(fleet: Fleet, name: str, count: int) -> int:
    """How many of its submissions were answered pending with a position and a reason."""
    queued = 0
    for _ in range(count):
        answer = await fleet.submit(_job(name), actor="bench")
        waits = answer["status"] == "pending" and answer["reason"] is not None
        queued += waits and bool(answer["queue_position"])
    return queued


if __name__ == "__main__":
    for line in run():
        print(f"{line['name']}: {line['value']:.2f} {line['unit']}")
