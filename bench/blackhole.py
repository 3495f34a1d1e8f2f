"""The "black hole" (issue 26): one broken worker among healthy ones fails every job it
takes, fast, so without a quarantine it takes a large share of the queue.

In process (the actors and SQLite, no HTTP: the decisions are what is measured), with
simulated workers: each reads its stream, says `running`, and after JOB_S says
`completed`; the broken one says `failed` with a CUDA error after BROKEN_S. JOBS jobs
are queued at once. Three runs: the healthy workers alone; with the broken one and no
automatic quarantine (`--quarantine-after 0`: before); with it at its default (after).
Reported: the attempts lost to the broken worker (target: at most --quarantine-after)
and each makespan, the one with the broken worker against the healthy fleet alone
(target: within 10 %). Run alone with `python -m bench.blackhole`.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import Row, row
from bench.fleet_common import pick
from bench.inproc_fleet import connect_worker, in_process_fleet
from tunefleet.actors import messages as m
from tunefleet.actors.context import FleetSettings
from tunefleet.actors.fleet import Fleet
from tunefleet.actors.quarantine_policy import DEFAULT_QUARANTINE_AFTER, QuarantineRule
from tunefleet.actors.records import JobRecord
from tunefleet.actors.stream import EventQueue

HEALTHY = 9
JOBS: int = pick(500, 120)
JOB_S: float = pick(0.05, 0.02)
BROKEN_S = 0.002  # a black hole fails at once: that is why it eats the queue
CUDA = "exit code 1: RuntimeError: CUDA error: an illegal memory access was encountered"


@dataclass
class Run:
    makespan_s: float
    lost: int  # attempts that ran on the broken worker
    failed_jobs: int
    quarantined: str | None


def run() -> list[Row]:
    alone = _run_once(broken=False, quarantine_after=DEFAULT_QUARANTINE_AFTER)
    before = _run_once(broken=True, quarantine_after=0)
    after = _run_once(broken=True, quarantine_after=DEFAULT_QUARANTINE_AFTER)
    load = os.getloadavg()[0]
    note = (
        f"{JOBS} jobs of {JOB_S * 1000:g} ms, {HEALTHY} healthy workers + 1 broken, in "
        f"process on SQLite; load avg {load:.1f}"
    )
    slower = (after.makespan_s / alone.makespan_s - 1) * 100
    return [
        row("lost to the broken worker, no quarantine", before.lost, "attempts", None, note),
        row(
            "lost to the broken worker, quarantine",
            after.lost,
            "attempts",
            f"<= {DEFAULT_QUARANTINE_AFTER}",
            f"quarantined: {after.quarantined}",
        ),
        row("jobs failed, no quarantine", before.failed_jobs, "jobs", None, note),
        row("jobs failed, quarantine", after.failed_jobs, "jobs", "0", note),
        row("makespan, healthy workers alone", alone.makespan_s, "s", None, note),
        row("makespan, broken + healthy, no quarantine", before.makespan_s, "s", None, note),
        row("makespan, broken + healthy, quarantine", after.makespan_s, "s", None, note),
        row("makespan vs healthy alone, quarantine", slower, "%", "<= 10", note),
    ]


def _run_once(*, broken: bool, quarantine_after: int) -> Run:
    settings = FleetSettings(local_runner=False, quarantine=QuarantineRule(quarantine_after))
    with tempfile.TemporaryDirectory() as data_dir:
        return asyncio.run(_simulate(Path(data_dir), settings, broken))


async def _simulate(data_dir: Path, settings: FleetSettings, broken: bool) -> Run:
    async with in_process_fleet(data_dir, settings) as (fleet, _db):
        names = [f"ok{n}" for n in range(HEALTHY)] + (["broken"] if broken else [])
        workers = [(name, *await connect_worker(fleet, name, {})) for name in names]
        lost = [0]
        tasks = [
            asyncio.create_task(_worker(fleet, wid, queue, name == "broken", lost))
            for name, wid, queue in workers
        ]
        started = time.perf_counter()
        job_ids = [str((await fleet.submit(_job(), actor="bench"))["job_id"]) for _ in range(JOBS)]
        await _all_ended(fleet)
        makespan = time.perf_counter() - started
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        rows = [await fleet.ctx.persistence.store.get_job(job_id) for job_id in job_ids]
        failed = sum(1 for r in rows if r is not None and r.state != "completed")
        reason = None
        for name, wid, _ in workers:
            if name == "broken":
                reason = fleet.ctx.workers[wid].rec.quarantine_reason
        return Run(makespan, lost[0], failed, reason)


async def _all_ended(fleet: Fleet) -> None:
    """Until every job has ended: its actor stops then (polled: no event says it)."""
    for _ in range(100_000):  # bounded: 1,000 s
        if not fleet.ctx.jobs:
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"{len(fleet.ctx.jobs)} jobs never ended")


async def _worker(
    fleet: Fleet, worker_id: str, stream: EventQueue, broken: bool, lost: list[int]
) -> None:
    while (event := await stream.get()) is not None:
        if event.type != "job_submit":
            continue
        job_id, attempt = str(event.data["job_id"]), event.data.get("attempt")
        await fleet.report_status(
            worker_id, job_id, m.StatusReported(worker_id, "running", None, None, attempt)
        )
        if broken:
            await asyncio.sleep(BROKEN_S)
            lost[0] += 1
            ended = m.StatusReported(worker_id, "failed", None, CUDA, attempt)
        else:
            await asyncio.sleep(JOB_S)
            ended = m.StatusReported(worker_id, "completed", None, None, attempt)
        try:
            await fleet.report_status(worker_id, job_id, ended)
        finally:
            fleet.report_written(worker_id, job_id)


def _job() -> JobRecord:
    return JobRecord(
        job_id="",
        seq=0,
        state="pending",
        target="worker",
        config={"max_train_steps": 1, "model": "bench"},
        config_name="bench",
        name="bench",
        command=None,
        worker_labels={},
        gpu_count=1,
        priority=0,
        max_retries=3,
    )


if __name__ == "__main__":
    for line in run():
        print(line)
