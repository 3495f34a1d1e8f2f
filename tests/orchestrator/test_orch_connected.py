"""Being connected (an open SSE stream) is part of being dispatchable: a worker whose
stream closed keeps its state until the heartbeat timeout but is never given a job, and
a job's wait reason says when a matching worker exists but is not connected."""

from __future__ import annotations

import pytest
from orchestrator_testkit import FakeAgent, FleetHarness, gpu_report

pytestmark = pytest.mark.timeout(30)


async def test_a_worker_whose_stream_closed_is_never_chosen(harness: FleetHarness) -> None:
    departed = await harness.agent("w1")
    present = await harness.agent("w2")
    departed.close_stream()
    await harness.settle()
    # Its state is the seed's: still idle until the heartbeat timeout, but not connected.
    snapshot = harness.worker(departed.worker_id).snapshot()
    assert (snapshot["status"], snapshot["connected"]) == ("idle", False)

    first = await harness.submit()
    second = await harness.submit()
    assert present.submitted_jobs() == [first]
    assert departed.submitted_jobs() == []
    assert await harness.job_state(second) == "pending"
    reason = await harness.fleet.wait_reason(second)
    assert reason == (
        f"every qualifying worker is busy or draining: {present.worker_id}; "
        f"{departed.worker_id} matches but is not connected"
    )


async def test_a_job_waits_for_a_departed_worker_until_its_stream_is_back(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    agent.close_stream()
    await harness.settle()
    job_id = await harness.submit()
    assert await harness.job_state(job_id) == "pending"
    assert await harness.fleet.wait_reason(job_id) == (
        f"matching worker {agent.worker_id} is not connected (registered, no open stream); "
        "the job starts when it connects"
    )

    await agent.connect()
    await harness.settle()
    assert agent.submitted_jobs() == [job_id]


async def test_wait_reason_names_a_matching_worker_that_has_not_connected_yet(
    harness: FleetHarness,
) -> None:
    # Issue 11 item 9: "no worker matches label team=nlp" while one with team=nlp connects.
    await harness.agent("other", labels={"team": "vision"})
    # Registered (so its GPUs are known) but its stream is not open yet.
    nlp = await harness.agent("nlp-1", labels={"team": "nlp"}, connect=False)
    job_id = await harness.submit(labels={"team": "nlp"})
    assert await harness.fleet.wait_reason(job_id) == (
        f"matching worker {nlp.worker_id} is not connected (registered, no open stream); "
        "the job starts when it connects"
    )
    await nlp.connect()
    await harness.settle()
    assert nlp.submitted_jobs() == [job_id]


async def test_a_created_worker_that_never_connected_may_match(harness: FleetHarness) -> None:
    # Before its first registration only its admin labels are known, not its GPUs.
    other = await harness.agent("other", labels={"team": "vision"})
    nlp = await harness.create_worker("nlp-1", labels={"team": "nlp"})
    await harness.create_worker("cv-2", labels={"team": "vision"})
    await harness.settle()
    job_id = await harness.submit(labels={"team": "nlp"}, gpu_count=2)
    assert await harness.fleet.wait_reason(job_id) == (
        f"worker {nlp} may match but has not connected yet (its GPUs are not known until it "
        "does); the job may start when it connects"
    )
    # Once it has registered its GPUs are judged like anyone's.
    agent = FakeAgent(harness, nlp, "nlp-1", gpu_report(count=1), {})
    await agent.register()
    await harness.settle()
    # (It has 1 GPU, so it no longer matches: the reason is about the connected fleet.)
    assert await harness.fleet.wait_reason(job_id) == (
        "needs 2 GPUs; the only remote worker has 1; no worker matches label team=nlp "
        f"(closest: {other.worker_id} has team=vision)"
    )
    assert other.submitted_jobs() == []


async def test_wait_reason_without_a_matching_worker_is_unchanged(harness: FleetHarness) -> None:
    other = await harness.agent("other", labels={"team": "vision"})
    await harness.create_worker("cv-2", labels={"team": "vision"})
    await harness.settle()
    job_id = await harness.submit(labels={"team": "nlp"})
    assert await harness.fleet.wait_reason(job_id) == (
        f"no worker matches label team=nlp (closest: {other.worker_id} has team=vision)"
    )
