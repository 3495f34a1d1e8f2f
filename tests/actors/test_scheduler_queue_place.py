"""Scheduler.place_in_queue: a pending job's rank (priority first, then submission order)
and its wait reason, in one answer, the same as sorting the queue would give."""

from __future__ import annotations

import asyncio
from typing import cast

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.actors.test_scheduler_place_new import Ctx, OfferedJob
from tunefleet.actors import messages as m
from tunefleet.actors.clock import FakeClock
from tunefleet.actors.context import FleetContext
from tunefleet.actors.matching import PendingJob, Requirements, WorkerView
from tunefleet.actors.runtime import ActorSystem
from tunefleet.actors.scheduler import Scheduler


async def _places(jobs: list[PendingJob], asked: list[str]) -> list[object]:
    ctx = Ctx({job.job_id: OfferedJob() for job in jobs})
    system = ActorSystem(FakeClock())
    scheduler = system.spawn(Scheduler(cast(FleetContext, ctx)))
    try:
        for job in jobs:
            scheduler.tell(m.JobWaiting(job))
        places = [await scheduler.ask(m.QueuePlace(job_id)) for job_id in asked]
        reasons = [await scheduler.ask(m.ExplainWait(job_id)) for job_id in asked]
        return [(place, reason) for place, reason in zip(places, reasons, strict=True)]
    finally:
        await system.stop_all(drain=False)


def test_rank_goes_by_priority_then_submission_and_carries_the_wait_reason() -> None:
    jobs = [
        PendingJob("j_a", 0, 1, Requirements("worker")),
        PendingJob("j_b", 5, 2, Requirements("worker")),
        PendingJob("j_c", 0, 3, Requirements("worker")),
        PendingJob("j_d", 5, 4, Requirements("worker")),
    ]
    answers = asyncio.run(_places(jobs, ["j_a", "j_b", "j_c", "j_d", "j_gone"]))
    ranks = [cast(tuple[int | None, str | None], place)[0] for place, _ in answers]
    assert ranks == [3, 1, 4, 2, None]
    for place, reason in answers:
        assert cast(tuple[int | None, str | None], place)[1] == reason
    assert answers[-1] == ((None, None), None)


@given(st.lists(st.integers(min_value=-3, max_value=3), min_size=1, max_size=30))
@settings(max_examples=50, deadline=None)
def test_rank_is_the_index_in_the_sorted_queue(priorities: list[int]) -> None:
    jobs = [
        PendingJob(f"j_{n}", priority, n, Requirements("worker"))
        for n, priority in enumerate(priorities)
    ]
    order = [j.job_id for j in sorted(jobs, key=lambda j: (-j.priority, j.seq))]
    answers = asyncio.run(_places(jobs, [j.job_id for j in jobs]))
    for job, (place, _) in zip(jobs, answers, strict=True):
        assert cast(tuple[int | None, str | None], place)[0] == order.index(job.job_id) + 1


def test_a_workers_new_view_changes_the_reason_and_its_idling_does_not_hide_it() -> None:
    async def scenario() -> list[object]:
        ctx = Ctx({"j_big": OfferedJob()})
        system = ActorSystem(FakeClock())
        scheduler = system.spawn(Scheduler(cast(FleetContext, ctx)))
        try:
            small = WorkerView("w_1", gpu_count=1)
            scheduler.tell(m.WorkerChanged("w_1", small, schedulable=False))
            big_job = PendingJob("j_big", 0, 1, Requirements("worker", gpu_count=2))
            scheduler.tell(m.JobWaiting(big_job))
            answers = [await scheduler.ask(m.ExplainWait("j_big"))]
            # Idle now, its view the same: the reason is kept.
            scheduler.tell(m.WorkerChanged("w_1", small, schedulable=True))
            answers.append(await scheduler.ask(m.ExplainWait("j_big")))
            big = WorkerView("w_1", gpu_count=2)
            scheduler.tell(m.WorkerChanged("w_1", big, schedulable=False))  # busy, new view
            answers.append(await scheduler.ask(m.ExplainWait("j_big")))
            return answers
        finally:
            await system.stop_all(drain=False)

    first, idle, bigger = asyncio.run(scenario())
    assert "needs 2" in str(first) and idle == first
    assert bigger == "every qualifying worker is busy or draining: w_1"


@given(
    st.lists(st.integers(min_value=-3, max_value=3), min_size=1, max_size=20),
    st.data(),
)
@settings(max_examples=50, deadline=None)
def test_rank_follows_jobs_that_leave_and_come_back(
    priorities: list[int], data: st.DataObject
) -> None:
    """JobGone takes a job out of the order; a job told again (a requeue, with its
    priority as it is now) is ranked by its latest view, never counted twice."""
    jobs = {
        f"j_{n}": PendingJob(f"j_{n}", priority, n, Requirements("worker"))
        for n, priority in enumerate(priorities)
    }
    gone = data.draw(st.sets(st.sampled_from(sorted(jobs))))
    again = {
        job_id: PendingJob(
            job_id, data.draw(st.integers(-3, 3)), jobs[job_id].seq, jobs[job_id].requirements
        )
        for job_id in data.draw(st.sets(st.sampled_from(sorted(jobs))))
    }

    async def scenario() -> list[object]:
        ctx = Ctx({job_id: OfferedJob() for job_id in jobs})
        system = ActorSystem(FakeClock())
        scheduler = system.spawn(Scheduler(cast(FleetContext, ctx)))
        try:
            for job in jobs.values():
                scheduler.tell(m.JobWaiting(job))
            for job_id in sorted(gone):
                scheduler.tell(m.JobGone(job_id))
            for job in again.values():
                scheduler.tell(m.JobWaiting(job))
            return [await scheduler.ask(m.QueuePlace(job_id)) for job_id in sorted(jobs)]
        finally:
            await system.stop_all(drain=False)

    latest = {job_id: job for job_id, job in jobs.items() if job_id not in gone} | again
    order = sorted(latest.values(), key=lambda j: (-j.priority, j.seq))
    for job_id, place in zip(sorted(jobs), asyncio.run(scenario()), strict=True):
        rank = cast(tuple[int | None, str | None], place)[0]
        expected = [j.job_id for j in order].index(job_id) + 1 if job_id in latest else None
        assert rank == expected
