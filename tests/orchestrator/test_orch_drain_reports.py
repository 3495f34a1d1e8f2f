"""Drain and resume, ephemeral workers leaving after their job, the report hold before
the next dispatch, and who may report on a job."""

from __future__ import annotations

import pytest
from orchestrator_testkit import FakeAgent, FleetHarness

from tunefleet.actors.clock import FakeClock
from tunefleet.errors import Conflict, Forbidden, NotFound

pytestmark = pytest.mark.timeout(30)


async def _busy(harness: FleetHarness, agent: FakeAgent) -> str:
    job_id = await harness.submit()
    assert agent.submitted_jobs()[-1] == job_id
    await agent.report(job_id, "running")
    return job_id


# --- drain --------------------------------------------------------------------------


async def test_a_drain_is_sticky_across_a_loss_and_a_new_registration(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await _busy(harness, agent)
    snapshot = await harness.fleet.drain(agent.worker_id, actor="admin")
    assert (snapshot["status"], snapshot["drain_requested"]) == ("draining", True)
    assert len(agent.received("drain")) == 1
    # The running job finishes; the worker stays draining and takes nothing new.
    await agent.report(job_id, "completed")
    assert harness.worker_state(agent.worker_id) == "draining"
    waiting = await harness.submit()
    assert await harness.job_state(waiting) == "pending"

    await agent.disconnect()
    assert harness.worker_state(agent.worker_id) == "offline"
    reply = await agent.register()
    assert reply["resume_job"] is None
    await agent.connect(agent.last_event_id)
    await harness.settle()
    assert harness.worker_state(agent.worker_id) == "draining"
    assert len(agent.received("drain")) == 2, "the new stream is told again"
    assert await harness.job_state(waiting) == "pending"
    row = await harness.store.get_worker(agent.worker_id)
    assert row is not None and row.drain_requested

    snapshot = await harness.fleet.resume(agent.worker_id, actor="admin")
    assert (snapshot["status"], snapshot["drain_requested"]) == ("idle", False)
    await harness.settle()
    assert agent.submitted_jobs()[-1] == waiting
    assert await harness.job_state(waiting) == "dispatched"


async def test_a_drain_requested_while_offline_applies_at_the_next_registration(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    await agent.disconnect()
    snapshot = await harness.fleet.drain(agent.worker_id, actor="admin")
    assert (snapshot["status"], snapshot["drain_requested"]) == ("offline", True)
    await agent.register()
    await agent.connect()
    await harness.settle()
    assert harness.worker_state(agent.worker_id) == "draining"
    job_id = await harness.submit()
    assert await harness.job_state(job_id) == "pending"


async def test_resuming_a_draining_busy_worker_keeps_its_job(harness: FleetHarness) -> None:
    agent = await harness.agent("w1")
    job_id = await _busy(harness, agent)
    await harness.fleet.drain(agent.worker_id, actor="admin")
    snapshot = await harness.fleet.resume(agent.worker_id, actor="admin")
    assert (snapshot["status"], snapshot["current_job_id"]) == ("busy", job_id)
    await agent.report(job_id, "completed")
    assert harness.worker_state(agent.worker_id) == "idle"


async def test_resuming_a_worker_that_is_not_draining_is_a_conflict(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    with pytest.raises(Conflict, match="not draining"):
        await harness.fleet.resume(agent.worker_id, actor="admin")
    with pytest.raises(NotFound):
        await harness.fleet.resume("w_missing", actor="admin")


# --- ephemeral workers ---------------------------------------------------------------


async def test_an_ephemeral_worker_is_told_to_shut_down_when_no_other_work_fits(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("spot", worker_type="ephemeral")
    job_id = await _busy(harness, agent)
    # Queued work it cannot take (needs 8 GPUs) does not keep it alive.
    too_big = await harness.submit(gpu_count=8)
    await agent.report(job_id, "completed")
    [shutdown] = agent.received("shutdown")
    assert shutdown.data["reason"] == "ephemeral worker finished its job"
    assert await harness.job_state(too_big) == "pending"
    assert agent.submitted_jobs() == [job_id]


async def test_an_ephemeral_worker_with_fitting_work_takes_it_once_its_agent_asks(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("spot", worker_type="ephemeral")
    first = await _busy(harness, agent)
    second = await harness.submit()
    await agent.report(first, "completed")
    assert agent.received("shutdown") == []
    # Not pushed unasked (tunefleet's agent exits after one job) ...
    assert agent.submitted_jobs() == [first]
    # ... but SimpleTuner's agent asks for the queue, and then it takes the job.
    assert await harness.fleet.has_work_for(agent.worker_id) is True
    await harness.settle()
    assert agent.submitted_jobs() == [first, second]
    await agent.run_to_completion(second)
    assert len(agent.received("shutdown")) == 1
    assert await harness.fleet.has_work_for(agent.worker_id) is False


async def test_a_draining_ephemeral_worker_is_told_to_shut_down_after_its_job(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("spot", worker_type="ephemeral")
    job_id = await _busy(harness, agent)
    other = await harness.submit()  # fits, but a draining worker takes nothing new
    await harness.fleet.drain(agent.worker_id, actor="admin")
    assert agent.received("shutdown") == [], "not while its job runs"
    await agent.report(job_id, "completed")
    [shutdown] = agent.received("shutdown")
    assert shutdown.data["reason"] == "worker drained after its job"
    assert await harness.job_state(other) == "pending"
    assert harness.worker_state(agent.worker_id) == "draining"


async def test_an_idle_ephemeral_worker_is_told_to_shut_down_when_drained(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("spot", worker_type="ephemeral")
    await harness.fleet.drain(agent.worker_id, actor="admin")
    [shutdown] = agent.received("shutdown")
    assert shutdown.data["reason"] == "worker drained"


# --- report hold ---------------------------------------------------------------------


async def test_the_next_job_waits_until_the_final_report_is_answered(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    first = await _busy(harness, agent)
    second = await harness.submit()
    reply = await agent.report(first, "completed", written=False)
    assert reply == {"success": True, "release_hold": True}
    assert agent.submitted_jobs() == [first], "no job_submit before the answer is written"
    assert await harness.job_state(second) == "pending"
    assert harness.worker_state(agent.worker_id) == "idle"

    harness.fleet.report_written(agent.worker_id, first)
    await harness.settle()
    assert agent.submitted_jobs() == [first, second]


async def test_the_report_hold_ends_by_itself_after_hold_s(harness: FleetHarness) -> None:
    agent = await harness.agent("w1")
    first = await _busy(harness, agent)
    second = await harness.submit()
    await agent.report(first, "completed", written=False)
    hold = harness.settings.report_hold_s
    await harness.advance(hold - 0.001)
    assert agent.submitted_jobs() == [first]
    await harness.advance(0.001)
    assert agent.submitted_jobs() == [first, second]
    # A confirmation arriving after the fallback changes nothing.
    harness.fleet.report_written(agent.worker_id, first)
    await harness.settle()
    assert agent.submitted_jobs() == [first, second]


async def test_an_answered_final_report_cancels_the_hold_fallback(
    harness: FleetHarness,
) -> None:
    """The fallback timer goes when the answer is written: it would only wake the worker
    actor again, a message per job cycle that changes nothing."""
    if not isinstance(harness.clock, FakeClock):
        pytest.skip("counts the fake clock's timers")
    agent = await harness.agent("w1")
    first = await _busy(harness, agent)
    await agent.report(first, "completed", written=False)
    held = harness.clock.pending_timers()
    harness.fleet.report_written(agent.worker_id, first)
    await harness.settle()
    assert harness.clock.pending_timers() == held - 1
    assert harness.worker_state(agent.worker_id) == "idle"


# --- who may report ------------------------------------------------------------------


async def test_a_stale_worker_is_refused_once_its_job_was_reassigned(
    harness: FleetHarness,
) -> None:
    stale = await harness.agent("stale")
    job_id = await _busy(harness, stale)
    fresh = await harness.agent("fresh")
    await stale.disconnect()
    assert fresh.submitted_jobs() == [job_id]

    with pytest.raises(Conflict, match="reassigned"):
        await stale.report(job_id, "running", {"step": 2})
    await fresh.report(job_id, "running")
    with pytest.raises(Conflict):
        await stale.report(job_id, "completed")
    assert await harness.job_state(job_id) == "running"

    # On its next registration it is told to abandon the job.
    reply = await stale.register(current_job_id=job_id)
    assert reply["abandon_job"] == job_id and reply["resume_job"] is None
    assert harness.worker_state(stale.worker_id) == "idle"

    await fresh.report(job_id, "completed")
    with pytest.raises(Conflict, match="already completed"):
        await stale.report(job_id, "completed")
    with pytest.raises(Conflict, match="already completed"):
        await stale.report(job_id, "failed", error="late")
    job = await harness.job(job_id)
    assert (job.state, job.worker_id) == ("completed", fresh.worker_id)


async def test_a_worker_never_assigned_to_a_job_is_forbidden(harness: FleetHarness) -> None:
    owner = await harness.agent("owner")
    job_id = await _busy(harness, owner)
    stranger = await harness.agent("stranger")
    with pytest.raises(Forbidden, match="not assigned"):
        await stranger.report(job_id, "running")
    with pytest.raises(Forbidden):
        await harness.fleet.report_logs(
            stranger.worker_id, job_id, 1, [{"seq": 1, "stream": "stdout", "line": "x", "at": 1.0}]
        )
    await owner.report(job_id, "completed")
    with pytest.raises(Forbidden, match="not assigned"):
        await stranger.report(job_id, "completed")
    with pytest.raises(NotFound, match="j_nope"):
        await stranger.report("j_nope", "running")
    assert await harness.job_state(job_id) == "completed"


async def test_a_retried_final_report_gets_the_same_answer(harness: FleetHarness) -> None:
    agent = await harness.agent("w1")
    job_id = await _busy(harness, agent)
    await agent.report(job_id, "completed")
    assert await agent.report(job_id, "completed") == {"success": True}
    assert (await harness.timeline_kinds(job_id)).count("completed") == 1


async def test_a_job_the_agent_stopped_on_its_own_is_requeued_not_cancelled(
    harness: FleetHarness,
) -> None:
    """An agent shutting down stops its job and says cancelled: not the job's fault."""
    agent = await harness.agent("w1")
    job_id = await _busy(harness, agent)
    await agent.report(job_id, "cancelled", error="agent shutting down")
    first = (await harness.attempts(job_id))[0]
    assert first.outcome == "lost"
    assert first.reason == f"worker {agent.worker_id} stopped the job: agent shutting down"
    job = await harness.job(job_id)
    assert (job.state, job.attempts) == ("dispatched", 2)


# --- deleting workers ------------------------------------------------------------------


async def test_deleting_a_busy_worker_needs_force_and_then_requeues_its_job(
    harness: FleetHarness,
) -> None:
    doomed = await harness.agent("doomed")
    job_id = await _busy(harness, doomed)
    with pytest.raises(Conflict, match="drain it"):
        await harness.fleet.delete_worker(doomed.worker_id, force=False, actor="admin")
    assert await harness.job_state(job_id) == "running"

    lost = await harness.fleet.delete_worker(doomed.worker_id, force=True, actor="admin")
    await harness.settle()
    assert lost == job_id
    [shutdown] = doomed.received("shutdown")
    assert "deleted" in shutdown.data["reason"]
    assert doomed.stream_closed
    assert await harness.store.get_worker(doomed.worker_id) is None
    with pytest.raises(NotFound):
        await doomed.heartbeat()
    first = (await harness.attempts(job_id))[0]
    assert first.outcome == "lost" and first.reason == f"worker {doomed.worker_id} deleted"
    # Requeued: the next worker to come gets it.
    heir = await harness.agent("heir")
    assert heir.submitted_jobs() == [job_id]
