"""Scheduling through the actors: dispatch order, and races between a matching pass and
the jobs or workers it picked changing meanwhile."""

from __future__ import annotations

import asyncio

import pytest
from orchestrator_testkit import FakeAgent, FleetHarness

from tunefleet.actors import messages as m
from tunefleet.actors.matching import PendingJob, Requirements

pytestmark = pytest.mark.timeout(30)


async def _registered(harness: FleetHarness, name: str) -> FakeAgent:
    """Registered but its stream not yet open: not schedulable yet."""
    return await harness.agent(name, connect=False)


async def test_a_worker_offered_to_a_job_cancelled_meanwhile_is_offered_again(
    harness: FleetHarness,
) -> None:
    doomed = await harness.submit()
    agent = await _registered(harness, "w1")
    # The cancel is under way when the worker becomes free and a pass offers it the job.
    cancel = asyncio.create_task(harness.fleet.cancel(doomed, actor="alice"))
    await asyncio.sleep(0)
    await agent.connect()
    await cancel
    await harness.settle()
    assert await harness.job_state(doomed) == "cancelled"
    assert harness.worker_state(agent.worker_id) == "idle"

    later = await harness.submit()
    assert agent.submitted_jobs() == [later]


async def test_a_worker_planned_for_a_job_that_already_ended_stays_free(
    harness: FleetHarness,
) -> None:
    # A job the scheduler still holds as pending while its actor is already gone.
    ghost = PendingJob("j_ghost", priority=9, seq=0, requirements=Requirements("worker"))
    harness.ctx.scheduler.tell(m.JobWaiting(ghost))
    agent = await harness.agent("w1")
    assert agent.submitted_jobs() == []
    job_id = await harness.submit()
    assert agent.submitted_jobs() == [job_id]
