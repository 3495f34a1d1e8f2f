"""Jobs held for approval: never dispatched while held, queued in their original place
once approved, ended cancelled when rejected, and held still after a restart."""

from __future__ import annotations

import pytest
from orchestrator_testkit import FleetHarness, job_record

from tunefleet.errors import Conflict, NotFound

pytestmark = pytest.mark.timeout(30)
HELD = "awaiting approval by a lead of team vision (rule: more than 4 GPUs)"


async def _held(harness: FleetHarness, **kwargs: object) -> str:
    reply = await harness.fleet.submit(job_record(**kwargs), actor="tester", held=HELD)  # type: ignore[arg-type]
    assert (reply["status"], reply["reason"], reply["queue_position"]) == (
        "pending_approval",
        HELD,
        None,
    )
    await harness.settle()
    return str(reply["job_id"])


async def test_a_held_job_is_never_dispatched_until_approved(harness: FleetHarness) -> None:
    agent = await harness.agent("w1")
    job_id = await _held(harness)
    await harness.advance(30)
    assert agent.submitted_jobs() == [], "an idle worker does not take a held job"
    row = await harness.job(job_id)
    assert (row.state, row.wait_reason) == ("pending_approval", HELD)

    reply = await harness.fleet.decide_approval(job_id, "lead-1", approve=True)
    await harness.settle()
    assert reply["status"] == "pending"
    assert agent.submitted_jobs() == [job_id]
    assert await harness.timeline_kinds(job_id) == ["submitted", "approved", "dispatched"]


async def test_an_approved_job_keeps_its_place_ahead_of_later_submits(
    harness: FleetHarness,
) -> None:
    first = await _held(harness)
    later = await harness.submit()
    await harness.fleet.decide_approval(first, "admin", approve=True)
    await harness.settle()
    agent = await harness.agent("w1")
    assert agent.submitted_jobs() == [first], "the older submit goes first"
    assert (await harness.job(first)).seq < (await harness.job(later)).seq


async def test_a_rejected_job_ends_cancelled_with_the_reason(harness: FleetHarness) -> None:
    agent = await harness.agent("w1")
    job_id = await _held(harness)
    reply = await harness.fleet.decide_approval(
        job_id, "lead-1", approve=False, reason="too big for this week"
    )
    await harness.settle()
    row = await harness.job(job_id)
    assert (reply["status"], row.state) == ("cancelled", "cancelled")
    assert row.error == "rejected by lead-1: too big for this week"
    assert agent.submitted_jobs() == []
    with pytest.raises(Conflict, match=f"job {job_id} is cancelled, not awaiting approval"):
        await harness.fleet.decide_approval(job_id, "lead-1", approve=True)


async def test_a_held_job_can_be_cancelled(harness: FleetHarness) -> None:
    job_id = await _held(harness)
    await harness.fleet.cancel(job_id, "tester")
    await harness.settle()
    assert await harness.job_state(job_id) == "cancelled"


async def test_deciding_a_job_not_awaiting_approval_is_refused(harness: FleetHarness) -> None:
    queued = await harness.submit()
    with pytest.raises(Conflict, match=f"job {queued} is pending, not awaiting approval"):
        await harness.fleet.decide_approval(queued, "admin", approve=True)
    with pytest.raises(NotFound, match="Job not found: j_missing"):
        await harness.fleet.decide_approval("j_missing", "admin", approve=True)
    assert await harness.job_state(queued) == "pending"


@pytest.mark.parametrize("storage", ["sqlite"])
async def test_a_held_job_stays_held_across_a_restart(harness: FleetHarness) -> None:
    job_id = await _held(harness)
    after = await harness.restart(5.0)
    agent = await after.agent("w1")
    await after.advance(30)
    assert agent.submitted_jobs() == []
    assert await after.job_state(job_id) == "pending_approval"
    await after.fleet.decide_approval(job_id, "admin", approve=True)
    await after.settle()
    assert agent.submitted_jobs() == [job_id]
