"""Time-driven behaviour on the fake clock: heartbeat deadlines, never-connected workers,
acknowledgement, cancel-grace and run timeouts, and the removal of offline ephemeral
workers. Each boundary is checked just before (nothing happens) and at the deadline."""

from __future__ import annotations

import asyncio

import pytest
from orchestrator_testkit import FakeAgent, FleetHarness, token_hash

from tunefleet.fsm.job import MAX_UNDELIVERED

pytestmark = pytest.mark.timeout(30)

EPS = 0.001


async def test_a_worker_goes_offline_exactly_at_the_heartbeat_timeout(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    timeout = harness.settings.heartbeat_timeout_s

    await harness.advance(timeout - EPS)
    assert harness.worker_state(agent.worker_id) == "idle"
    assert agent.read() == [] and not agent.stream_closed

    await harness.advance(EPS)
    assert harness.worker_state(agent.worker_id) == "offline"
    agent.read()
    assert agent.stream_closed, "an offline worker's stream is closed"
    row = await harness.store.get_worker(agent.worker_id)
    assert row is not None and row.state == "offline"
    assert row.offline_at == pytest.approx(harness.clock.time())
    audit = await harness.store.list_audit(kind="worker.offline", target=agent.worker_id)
    assert len(audit) == 1
    assert "heartbeat timeout (120 s)" in audit[0].detail["reason"]
    # A heartbeat from a worker already offline is refused: it must register again.
    assert await agent.heartbeat() is False


async def test_heartbeats_push_the_deadline_back(harness: FleetHarness) -> None:
    agent = await harness.agent("w1")
    timeout = harness.settings.heartbeat_timeout_s

    await harness.advance(100)
    assert await agent.heartbeat() is True
    await harness.advance(100)  # 200 s after registering, 100 s after the heartbeat
    assert harness.worker_state(agent.worker_id) == "idle"
    await harness.advance(timeout - 100 - EPS)
    assert harness.worker_state(agent.worker_id) == "idle"
    await harness.advance(EPS)
    assert harness.worker_state(agent.worker_id) == "offline"


async def test_a_heartbeat_is_answered_at_once_unless_event_ids_need_reserving_first(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    await harness.settle()
    worker = harness.worker(agent.worker_id)
    turns: list[str] = []
    asyncio.get_running_loop().call_soon(turns.append, "turn")
    assert await agent.heartbeat() is True
    assert turns == []  # handled in the asker's task: no task, no turn of the loop
    # Its event ids nearly spent: the heartbeat goes through receive, which reserves first.
    worker.event_ids_reserved = worker.outbox.last_event_id + 1
    assert await agent.heartbeat() is True
    assert turns == ["turn"]
    assert worker.event_ids_reserved > worker.outbox.last_event_id + 1


async def test_the_job_of_a_lost_worker_is_requeued_and_dispatched_to_another(
    harness: FleetHarness,
) -> None:
    lost = await harness.agent("lost")
    job_id = await harness.submit()
    assert lost.submitted_jobs() == [job_id]
    await lost.report(job_id, "running", {"step": 1})
    survivor = await harness.agent("survivor")

    await harness.advance(60)
    assert await survivor.heartbeat() is True  # only the survivor keeps beating
    await harness.advance(60)

    assert harness.worker_state(lost.worker_id) == "offline"
    job = await harness.job(job_id)
    assert job.state == "dispatched"
    assert job.worker_id == survivor.worker_id
    assert job.attempts == 2
    assert job.progress is None, "progress of the lost attempt is dropped"
    first, second = await harness.attempts(job_id)
    assert first.worker_id == lost.worker_id and first.outcome == "lost"
    assert first.reason is not None
    assert lost.worker_id in first.reason and "heartbeat timeout" in first.reason
    assert second.worker_id == survivor.worker_id and second.outcome is None
    [submit] = survivor.received("job_submit")
    assert submit.data["job_id"] == job_id and submit.data["attempt"] == 2
    assert (await harness.timeline_kinds(job_id)) == [
        "submitted",
        "dispatched",
        "started",
        "requeued",
        "dispatched",
    ]
    # The survivor finishes it; the lost worker never hears of it again.
    await survivor.run_to_completion(job_id)
    assert await harness.job_state(job_id) == "completed"
    assert lost.submitted_jobs() == [job_id]


async def test_when_retries_run_out_the_job_fails_naming_the_worker_and_the_limit(
    harness: FleetHarness,
) -> None:
    """Job errors spend retries (a lost worker spends its own infrastructure budget:
    tests/orchestrator/test_orch_failure_kinds.py); two different errors are no poison."""
    first = await harness.agent("first")
    job_id = await harness.submit(max_retries=1)
    await first.report(job_id, "running")
    second = await harness.agent("second")
    await first.report(job_id, "failed", error="exit code 1: KeyError: 'unet'")
    job = await harness.job(job_id)
    assert (job.state, job.worker_id, job.attempts) == ("dispatched", second.worker_id, 2)
    await second.report(job_id, "running")

    await second.report(job_id, "failed", error="exit code 1: ValueError: no data")
    job = await harness.job(job_id)
    assert job.state == "failed"
    assert job.error is not None
    assert "ValueError: no data" in job.error
    assert "max_retries=1" in job.error
    assert harness.job_actor(job_id) is None, "a terminal job's actor stops"
    attempts = await harness.attempts(job_id)
    assert [a.outcome for a in attempts] == ["failed", "failed"]
    assert [a.kind for a in attempts] == ["job_error", "job_error"]
    assert [a.worker_id for a in attempts] == [first.worker_id, second.worker_id]


async def test_an_unacknowledged_dispatch_goes_back_to_pending_and_is_sent_again(
    harness: FleetHarness,
) -> None:
    """SimpleTuner's agent drops a job_submit that races its own completion report: the
    dispatch was not delivered, and spends no retry (PROTOCOL.md, job_submit)."""
    agent = await harness.agent("w1")
    job_id = await harness.submit(max_retries=0)
    ack_timeout = harness.settings.dispatch_ack_timeout_s
    assert agent.submitted_jobs() == [job_id]

    await harness.advance(ack_timeout - EPS)
    assert (await harness.job(job_id)).attempts == 1
    assert agent.received("job_cancel") == []

    with harness.ctx.hub.subscribe(frozenset({"job"})) as events:
        await harness.advance(EPS)
        published = [events.queue.get_nowait() for _ in range(events.queue.qsize())]
    # The live feed counts the undelivered dispatch apart, so followers (the CLI's
    # `jobs follow`, the web UI) say "attempt 1 of 1", not "2 of 1".
    assert [(e.data["attempt"], e.data["undelivered"]) for e in published][-1] == (2, 1)
    # The cancel stops an agent that did start it after all.
    [cancel] = agent.received("job_cancel")
    assert cancel.data["job_id"] == job_id
    job = await harness.job(job_id)
    assert (job.state, job.attempts, job.worker_id) == ("dispatched", 2, agent.worker_id)
    first = (await harness.attempts(job_id))[0]
    assert first.outcome == "undelivered"
    assert first.reason == f"worker {agent.worker_id} did not acknowledge the dispatch within 60 s"
    requeued = [e for e in await harness.timeline(job_id) if e.kind == "requeued"]
    assert [(e.attempt, e.detail) for e in requeued] == [
        (1, {"reason": first.reason, "undelivered": True, "kind": "undelivered"})
    ]
    [audit] = await harness.store.list_audit(kind="job.requeued", target=job_id)
    assert audit.detail["reason"] == first.reason
    submits = agent.received("job_submit")
    assert [e.data["attempt"] for e in submits] == [1, 2]
    # This time the agent acknowledges, and the job runs to its end: with max_retries=0,
    # the unacknowledged dispatch spent no retry.
    await agent.run_to_completion(job_id)
    assert await harness.job_state(job_id) == "completed"


async def _unacknowledged(harness: FleetHarness, agent: FakeAgent, times: int) -> None:
    """Let ``times`` dispatches pass their acknowledgement timeout; the agent keeps beating,
    idle, as one that dropped each job_submit would."""
    for _ in range(times):
        assert await agent.heartbeat() is True
        await harness.advance(harness.settings.dispatch_ack_timeout_s)


async def test_an_unacknowledged_dispatch_may_go_to_another_worker(
    harness: FleetHarness,
) -> None:
    first = await harness.agent("first")
    job_id = await harness.submit(max_retries=0)
    assert first.submitted_jobs() == [job_id]
    await harness.fleet.drain(first.worker_id, actor="admin")  # takes no new job
    second = await harness.agent("second")
    await _unacknowledged(harness, first, 1)
    assert second.submitted_jobs() == [job_id]
    await second.run_to_completion(job_id)
    job = await harness.job(job_id)
    assert (job.state, job.attempts) == ("completed", 2)
    assert [a.outcome for a in await harness.attempts(job_id)] == ["undelivered", "completed"]


async def test_an_unacknowledged_dispatch_goes_next_to_another_idle_worker(
    harness: FleetHarness,
) -> None:
    """Both workers idle: the job does not go back to the one that never acknowledged it
    (which, idle and first in fit order, would take it again)."""
    one, two = await harness.agent("one"), await harness.agent("two")
    job_id = await harness.submit(max_retries=0)
    [first] = [a for a in (one, two) if a.submitted_jobs() == [job_id]]
    other = two if first is one else one
    await _unacknowledged(harness, first, 1)
    assert other.submitted_jobs() == [job_id]
    # Not dispatched to it again: its idle heartbeat had the same job_submit (the same
    # event id) pushed once more (redelivery.py), but no second attempt went there.
    assert {(e.event_id, e.data["attempt"]) for e in first.received("job_submit")} == {
        (first.received("job_submit")[0].event_id, 1)
    }
    await other.run_to_completion(job_id)
    assert [a.worker_id for a in await harness.attempts(job_id)] == [
        first.worker_id,
        other.worker_id,
    ]


async def test_a_job_never_acknowledged_fails_at_the_bound_on_undelivered_dispatches(
    harness: FleetHarness,
) -> None:
    """An agent that takes every job_submit and never reports cannot bounce a job forever."""
    agent = await harness.agent("w1")
    job_id = await harness.submit(max_retries=3)
    await _unacknowledged(harness, agent, MAX_UNDELIVERED - 1)
    job = await harness.job(job_id)
    assert (job.state, job.attempts) == ("dispatched", MAX_UNDELIVERED)

    await _unacknowledged(harness, agent, 1)
    job = await harness.job(job_id)
    assert (job.state, job.attempts) == ("failed", MAX_UNDELIVERED)
    last = f"worker {agent.worker_id} did not acknowledge the dispatch within 60 s"
    assert job.error is not None
    assert job.error.startswith(
        f"dispatched {MAX_UNDELIVERED} times and never acknowledged (last: {last}); "
        "check the agents of the workers it was sent to"
    )
    assert "logs" in job.error and "no retries left" not in job.error
    outcomes = [a.outcome for a in await harness.attempts(job_id)]
    assert outcomes == ["undelivered"] * (MAX_UNDELIVERED - 1) + ["failed"]
    # Each unacknowledged dispatch was cancelled, in case the agent did start it.
    cancels = [e.data["job_id"] for e in agent.received("job_cancel")]
    assert cancels == [job_id] * MAX_UNDELIVERED
    assert harness.job_actor(job_id) is None
    assert harness.worker_state(agent.worker_id) == "idle"
    [audit] = await harness.store.list_audit(kind="job.failed", target=job_id)
    assert audit.detail["reason"] == job.error


async def test_closed_streams_and_acknowledgement_timeouts_count_together_toward_the_bound(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit(max_retries=0)
    for n in range(1, MAX_UNDELIVERED + 1):
        assert (await harness.job(job_id)).attempts == n
        if n % 2:
            await _unacknowledged(harness, agent, 1)
        else:
            agent.close_stream()  # before acknowledging; back after the grace
            await harness.settle()
            await harness.advance(harness.settings.reconnect_grace_s + 1)
            await agent.connect()
            await harness.settle()
    job = await harness.job(job_id)
    assert job.state == "failed", job
    assert job.error is not None
    assert job.error.startswith(f"dispatched {MAX_UNDELIVERED} times and never acknowledged")
    outcomes = [a.outcome for a in await harness.attempts(job_id)]
    assert outcomes == ["undelivered"] * (MAX_UNDELIVERED - 1) + ["failed"]
    reasons = [str(a.reason) for a in await harness.attempts(job_id)][:-1]
    closed = [n % 2 == 0 for n in range(1, MAX_UNDELIVERED)]
    assert ["did not reconnect" in r for r in reasons] == closed


async def test_a_created_worker_that_never_registers_goes_offline_at_the_timeout(
    harness: FleetHarness,
) -> None:
    worker_id = await harness.create_worker("ghost")
    never = harness.settings.never_connected_timeout_s
    assert harness.worker_state(worker_id) == "connecting"
    # It is not subject to the (shorter) heartbeat timeout before its first registration.
    await harness.advance(never - EPS)
    assert harness.worker_state(worker_id) == "connecting"
    await harness.advance(EPS)
    assert harness.worker_state(worker_id) == "offline"
    [audit] = await harness.store.list_audit(kind="worker.offline", target=worker_id)
    assert audit.detail["reason"] == "never connected within 600 s"


async def test_registering_in_time_cancels_the_never_connected_timeout(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("late", connect=False)
    await harness.advance(harness.settings.never_connected_timeout_s - 100)
    await agent.register()
    await agent.connect()
    for _ in range(5):
        await harness.advance(100)
        assert await agent.heartbeat() is True
    assert harness.worker_state(agent.worker_id) == "idle"


async def test_offline_ephemeral_workers_are_removed_after_an_hour(
    harness: FleetHarness,
) -> None:
    ephemeral = await harness.agent("spot", worker_type="ephemeral")
    persistent = await harness.agent("rack")
    await ephemeral.disconnect()
    await persistent.disconnect()
    retention = harness.settings.ephemeral_retention_s
    interval = harness.settings.health_check_interval_s

    await harness.advance(retention - interval)
    assert ephemeral.worker_id in harness.ctx.workers
    assert await harness.store.get_worker(ephemeral.worker_id) is not None

    await harness.advance(interval + EPS)  # the health check at or after the hour
    assert ephemeral.worker_id not in harness.ctx.workers
    assert await harness.store.get_worker(ephemeral.worker_id) is None
    assert harness.fleet.worker_for_token(token_hash("spot")) is None
    [deleted] = await harness.store.list_audit(kind="worker.deleted", target=ephemeral.worker_id)
    assert deleted.actor == "supervisor"
    # A persistent worker is kept, offline, however long it stays away.
    await harness.advance(10 * retention)
    assert harness.worker_state(persistent.worker_id) == "offline"
    assert await harness.store.get_worker(persistent.worker_id) is not None


async def test_an_ephemeral_worker_that_comes_back_within_the_hour_is_kept(
    harness: FleetHarness,
) -> None:
    ephemeral = await harness.agent("spot", worker_type="ephemeral")
    await ephemeral.disconnect()
    await harness.advance(harness.settings.ephemeral_retention_s - 300)
    await ephemeral.register()
    await ephemeral.connect()
    for _ in range(6):
        await harness.advance(100)
        await ephemeral.heartbeat()
    assert harness.worker_state(ephemeral.worker_id) == "idle"


async def test_a_cancel_the_worker_never_confirms_ends_at_the_grace_period(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job()
    reply = await harness.fleet.cancel(job_id, actor="alice")
    assert reply["status"] == "cancelling"
    await harness.settle()
    [cancel] = agent.received("job_cancel")
    assert cancel.data["job_id"] == job_id and "alice" in cancel.data["reason"]
    grace = harness.settings.cancel_grace_s

    await harness.advance(grace - EPS)
    assert await harness.job_state(job_id) == "running"
    await agent.heartbeat(job_id)

    await harness.advance(EPS)
    job = await harness.job(job_id)
    assert job.state == "cancelled"
    assert job.error == "cancelled by alice (the worker did not confirm the stop)"
    assert harness.worker_state(agent.worker_id) == "idle"
    # A late confirmation is answered like the first one, not refused.
    assert (await agent.report(job_id, "cancelled"))["success"] is True
    assert await harness.job_state(job_id) == "cancelled"


async def test_a_confirmed_cancel_ends_the_job_cancelled(harness: FleetHarness) -> None:
    agent, job_id = await harness.running_job()
    await harness.fleet.cancel(job_id, actor="alice")
    await harness.settle()
    await agent.report(job_id, "cancelled", error="stopped by request")
    job = await harness.job(job_id)
    assert (job.state, job.error) == ("cancelled", "cancelled by alice")
    await harness.advance(harness.settings.cancel_grace_s)  # the grace timer is gone
    assert (await harness.job(job_id)).error == "cancelled by alice"


async def test_a_job_past_its_timeout_is_stopped_and_fails(harness: FleetHarness) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit(timeout_minutes=1)
    await harness.advance(30)  # time spent dispatched does not count against the run
    await agent.report(job_id, "running")

    await harness.advance(60 - EPS)
    assert agent.received("job_cancel") == []
    await agent.heartbeat(job_id)
    await harness.advance(EPS)
    [cancel] = agent.received("job_cancel")
    assert cancel.data["reason"] == "exceeded its timeout of 1 minutes"
    assert await harness.job_state(job_id) == "running"

    await agent.report(job_id, "cancelled")
    job = await harness.job(job_id)
    assert (job.state, job.error) == ("failed", "exceeded its timeout of 1 minutes")


async def test_a_timed_out_job_whose_worker_never_confirms_fails_at_the_grace(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job(timeout_minutes=0.5)
    await harness.advance(30)
    assert len(agent.received("job_cancel")) == 1
    await agent.heartbeat(job_id)
    await harness.advance(harness.settings.cancel_grace_s)
    job = await harness.job(job_id)
    assert job.state == "failed"
    assert job.error == (
        "exceeded its timeout of 0.5 minutes (the worker did not confirm the stop)"
    )


async def test_a_job_cancelled_before_its_dispatch_was_acknowledged_is_not_requeued(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit()
    await harness.advance(10)
    assert (await harness.fleet.cancel(job_id, actor="alice"))["status"] == "cancelling"
    await harness.settle()
    assert len(agent.received("job_cancel")) == 1
    await harness.advance(harness.settings.dispatch_ack_timeout_s)  # ack timeout, then grace
    job = await harness.job(job_id)
    assert (job.state, job.attempts) == ("cancelled", 1), job
    assert job.error is not None and job.error.startswith("cancelled by alice")
    assert agent.submitted_jobs() == [job_id], "never dispatched again"
    assert harness.worker_state(agent.worker_id) == "idle"


async def test_losing_the_worker_of_a_job_being_cancelled_ends_it_cancelled(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    spare = await harness.agent("spare")
    job_id = await harness.submit()
    holder, other = (agent, spare) if agent.submitted_jobs() else (spare, agent)
    await holder.report(job_id, "running")
    await harness.fleet.cancel(job_id, actor="alice")
    await holder.disconnect()
    job = await harness.job(job_id)
    assert (job.state, job.error) == ("cancelled", "cancelled by alice")
    assert other.submitted_jobs() == []


async def test_a_job_cancelled_while_running_stays_cancelled_when_its_timeout_passes(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job(timeout_minutes=1)
    await harness.advance(30)
    await harness.fleet.cancel(job_id, actor="alice")
    await harness.advance(30)  # the run timeout passes while the agent is stopping it
    await agent.report(job_id, "cancelled")
    job = await harness.job(job_id)
    assert (job.state, job.error) == ("cancelled", "cancelled by alice")
    assert len(agent.received("job_cancel")) == 1


async def test_a_worker_that_registers_again_without_its_job_has_it_requeued(
    harness: FleetHarness,
) -> None:
    """The agent restarted between two heartbeats and lost its process."""
    agent, job_id = await harness.running_job()
    reply = await agent.register(current_job_id=None)
    assert reply["resume_job"] is None and reply["abandon_job"] is None
    await agent.connect(agent.last_event_id)
    await harness.settle()
    first = (await harness.attempts(job_id))[0]
    assert first.outcome == "lost"
    assert first.reason is not None and agent.worker_id in first.reason
    job = await harness.job(job_id)
    assert (job.state, job.attempts, job.worker_id) == ("dispatched", 2, agent.worker_id)
