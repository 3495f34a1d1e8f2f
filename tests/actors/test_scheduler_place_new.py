"""Scheduler.place_new: a job not yet stored takes an idle worker only when no pending job
could take it, so placing it before its first write never lets it jump the queue."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import cast

from hypothesis import HealthCheck, given, settings

from tests.actors.test_matching_properties import fleets, job_mixes, naive_plan, requirements
from tunefleet.actors import messages as m
from tunefleet.actors.clock import FakeClock
from tunefleet.actors.context import FleetContext
from tunefleet.actors.idle_workers import IdleWorkers
from tunefleet.actors.matching import PendingJob, Requirements, WorkerView, unmet
from tunefleet.actors.runtime import ActorSystem
from tunefleet.actors.scheduler import Scheduler


@dataclass
class OfferedJob:
    """A job actor as the scheduler sees it: it only records the workers offered to it."""

    offers: list[str] = field(default_factory=list)

    def try_tell(self, message: object) -> bool:
        assert isinstance(message, m.DispatchTo)
        self.offers.append(message.worker_id)
        return True


@dataclass
class Ctx:
    jobs: dict[str, OfferedJob] = field(default_factory=dict)


async def _place_new(
    fleet: list[WorkerView], pending: list[PendingJob], new: Requirements
) -> tuple[str | None, dict[str, OfferedJob]]:
    placed, jobs, _ = await _place_then_queue(fleet, pending, new)
    return placed, jobs


async def _place_then_queue(
    fleet: list[WorkerView], pending: list[PendingJob], new: Requirements
) -> tuple[str | None, dict[str, OfferedJob], tuple[object, object] | None]:
    """Workers and pending jobs told to a live scheduler, and the new job's placement
    asked right behind them, before the pass they make it owe has run on its own. When
    it must wait: the reason it was given, and the answer to queueing it (as a
    submission does once it is stored), then what QueuePlace says."""
    ctx = Ctx({job.job_id: OfferedJob() for job in pending})
    new_job = PendingJob("j_new", 0, 10_000, new)
    ctx.jobs[new_job.job_id] = OfferedJob()
    system = ActorSystem(FakeClock())
    scheduler = system.spawn(Scheduler(cast(FleetContext, ctx)))
    try:
        for job in pending:
            scheduler.tell(m.JobWaiting(job))
        for worker in fleet:
            scheduler.tell(m.WorkerChanged(worker.worker_id, worker, schedulable=True))
        placed = await scheduler.ask(m.PlaceNewJob(new_job))
        if isinstance(placed, str):
            return placed, ctx.jobs, None
        assert isinstance(placed, m.MustWait)
        queued = await scheduler.ask(m.QueueNewJob(new_job))
        assert queued == await scheduler.ask(m.QueuePlace(new_job.job_id))
        return None, ctx.jobs, (placed.reason, queued)
    finally:
        await system.stop_all(drain=False)


def test_an_older_pending_job_gets_the_worker_first() -> None:
    worker = WorkerView("w_1", gpu_count=1, gpu_vram_gb=80.0)
    older = PendingJob("j_old", 0, 1, Requirements("worker"))
    placed, jobs = asyncio.run(_place_new([worker], [older], Requirements("worker")))
    assert placed is None
    assert jobs["j_old"].offers == ["w_1"]


def test_a_free_worker_no_pending_job_fits_goes_to_the_new_job() -> None:
    small = WorkerView("w_small", gpu_count=1, gpu_vram_gb=80.0)
    big_job = PendingJob("j_big", 0, 1, Requirements("worker", gpu_count=4))
    placed, jobs = asyncio.run(_place_new([small], [big_job], Requirements("worker")))
    assert placed == "w_small"
    assert jobs["j_big"].offers == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), pending=job_mixes(), new=requirements())
def test_the_new_job_gets_the_best_worker_left_after_the_queue_had_its_turn(
    fleet: list[WorkerView], pending: list[PendingJob], new: Requirements
) -> None:
    placed, jobs = asyncio.run(_place_new(fleet, pending, new))
    latest = {w.worker_id: w for w in fleet}  # a repeated id: its last view counts
    connected = [w for w in latest.values() if w.connected]
    owed = naive_plan(pending, connected)
    offers = {job_id: job.offers for job_id, job in jobs.items() if job_id != "j_new"}
    assert offers == {job.job_id: [w for j, w in owed if j == job.job_id] for job in pending}
    taken = {w for _, w in owed}
    left = [w for w in connected if w.worker_id not in taken]
    expected = IdleWorkers(left).best_for(new.key())
    assert placed == (expected.worker_id if expected is not None else None)
    if placed is not None:
        worker = next(w for w in left if w.worker_id == placed)
        still_pending = [job for job in pending if not offers[job.job_id]]
        assert all(unmet(job.requirements, worker) is not None for job in still_pending)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), pending=job_mixes(), new=requirements())
def test_a_job_that_must_wait_is_told_the_reason_and_place_it_has_once_queued(
    fleet: list[WorkerView], pending: list[PendingJob], new: Requirements
) -> None:
    """The reason given before the job is stored (and stored with it) is the one the
    queue gives once it is in: a wait reason depends on the fleet, not on the queue.
    Queueing it never dispatches it (no idle worker fit it) and places it behind every
    job still pending at its priority or above."""
    placed, jobs, waited = asyncio.run(_place_then_queue(fleet, pending, new))
    if placed is not None:
        return
    assert waited is not None
    reason, (position, queued_reason) = waited[0], cast(tuple[object, object], waited[1])
    assert queued_reason == reason
    assert jobs["j_new"].offers == []
    still_pending = [job for job in pending if not jobs[job.job_id].offers]
    assert position == 1 + sum(1 for job in still_pending if job.priority >= 0)
