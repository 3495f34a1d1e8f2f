"""The reconnect grace: a job_submit written to a stream that closes before the worker
acknowledges it goes back to pending when the grace ends, without spending a retry;
a worker back within the grace keeps its job; one back later is fenced off."""

from __future__ import annotations

import pytest
from orchestrator_testkit import FleetHarness, Storage

from tunefleet.errors import Conflict

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def storage() -> Storage:
    """A restart reopens the same SQLite file."""
    return "sqlite"


GRACE_S = 5.0  # FleetSettings' default


async def test_a_job_in_a_stream_that_closed_is_pending_again_after_the_grace(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit(max_retries=0)
    assert agent.submitted_jobs() == [job_id]
    agent.close_stream()  # before any report: the job_submit may have reached nobody
    await harness.settle()

    await harness.advance(GRACE_S - 0.5)
    assert await harness.job_state(job_id) == "dispatched"
    await harness.advance(1.0)
    assert await harness.job_state(job_id) == "pending"
    row = await harness.job(job_id)
    assert row.worker_id is None
    attempts = await harness.attempts(job_id)
    assert [(a.number, a.outcome) for a in attempts] == [(1, "undelivered")]
    assert "did not reconnect within 5 s" in str(attempts[0].reason)
    assert harness.worker(agent.worker_id).current_job_id is None

    # It spent no retry: with max_retries=0 it is dispatched again, as attempt 2.
    other = await harness.agent("w2")
    assert other.submitted_jobs() == [job_id]
    assert (await harness.job(job_id)).attempts == 2
    await other.run_to_completion(job_id)
    assert await harness.job_state(job_id) == "completed"


async def test_a_worker_back_within_the_grace_keeps_its_job(harness: FleetHarness) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit()
    agent.close_stream()
    await harness.settle()
    await harness.advance(GRACE_S - 2.0)

    reply = await agent.register(current_job_id=job_id)
    assert reply["resume_job"]["job_id"] == job_id
    await agent.connect(agent.last_event_id)
    await harness.advance(GRACE_S * 3)
    assert await harness.job_state(job_id) == "dispatched"
    assert harness.worker(agent.worker_id).current_job_id == job_id
    await agent.run_to_completion(job_id)
    assert await harness.job_state(job_id) == "completed"
    assert [a.outcome for a in await harness.attempts(job_id)] == ["completed"]


async def test_a_worker_back_after_the_grace_is_told_to_abandon_the_job(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit()
    agent.close_stream()
    await harness.settle()
    await harness.advance(GRACE_S + 1.0)
    assert await harness.job_state(job_id) == "pending"
    other = await harness.agent("w2")
    assert other.submitted_jobs() == [job_id]

    # It did get the job_submit after all, and comes back with it: no second run.
    reply = await agent.register(current_job_id=job_id)
    assert reply["abandon_job"] == job_id and reply["resume_job"] is None
    await agent.connect()
    with pytest.raises(Conflict):
        await agent.report(job_id, "starting")
    await other.run_to_completion(job_id)
    assert await harness.job_state(job_id) == "completed"


async def test_an_acknowledged_job_is_not_taken_back_when_the_stream_closes(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit()
    await agent.report(job_id, "starting")
    agent.close_stream()
    await harness.settle()
    await harness.advance(GRACE_S * 3)
    # Running jobs are the heartbeat timeout's to judge, as before.
    assert await harness.job_state(job_id) == "running"


async def test_a_grace_for_an_earlier_close_does_not_end_a_later_one_early(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit()
    agent.close_stream()
    await harness.settle()
    await harness.advance(GRACE_S - 1.0)
    await agent.connect(agent.last_event_id)
    agent.close_stream()  # dropped again at once: a fresh grace starts now
    await harness.settle()
    await harness.advance(2.0)  # past the first close's grace, inside the second's
    assert await harness.job_state(job_id) == "dispatched"
    await harness.advance(GRACE_S)
    assert await harness.job_state(job_id) == "pending"


async def test_an_undelivered_attempt_still_spends_no_retry_after_a_restart(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit(max_retries=0)
    agent.close_stream()
    await harness.settle()
    await harness.advance(GRACE_S + 1.0)
    assert await harness.job_state(job_id) == "pending"

    restarted = await harness.restart(5.0)
    other = await restarted.agent("w2")
    assert other.submitted_jobs() == [job_id]
    # This attempt ran and failed on its own (a job error): max_retries=0 ends it.
    await other.report(job_id, "running")
    await other.report(job_id, "failed", error="exit code 1: ValueError: bad config")
    await restarted.settle()
    row = await restarted.job(job_id)
    assert (row.state, row.error) == ("failed", "exit code 1: ValueError: bad config")
    attempts = await restarted.attempts(job_id)
    assert [(a.outcome, a.kind) for a in attempts] == [
        ("undelivered", "undelivered"),
        ("failed", "job_error"),
    ]
