"""Restart reconciliation: the orchestrator stops mid-job, its database is closed, and a
new Fleet on the same file rebuilds the actors. Nothing submitted may be lost, and no
job may run twice."""

from __future__ import annotations

import pytest
from orchestrator_testkit import FakeAgent, FleetHarness, Storage

from tunefleet.actors import worker_actor
from tunefleet.fsm.job import MAX_UNDELIVERED
from tunefleet.storage.database import open_database
from tunefleet.storage.store import Store

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def storage() -> Storage:
    """A restart reopens the same SQLite file."""
    return "sqlite"


async def _running_job(harness: FleetHarness, agent: FakeAgent) -> str:
    job_id = await harness.submit()
    assert agent.submitted_jobs()[-1] == job_id
    await agent.report(job_id, "running", {"step": 3, "total": 10})
    return job_id


async def test_a_worker_that_comes_back_with_its_job_resumes_it_and_it_completes_once(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await _running_job(harness, agent)

    after = await harness.restart(5.0, agent)
    assert after.worker_state(agent.worker_id) == "busy"
    reply = await agent.register(current_job_id=job_id)
    assert reply["resume_job"] == {
        "job_id": job_id,
        "config_name": "test-config",
        "status": "running",
    }
    assert reply["abandon_job"] is None
    await agent.connect(agent.last_event_id)
    await after.settle()
    assert agent.received("job_submit") == agent.events[:1], "nothing is pushed again"
    assert after.worker_state(agent.worker_id) == "busy"

    # It keeps running past the heartbeat timeout as long as the agent beats.
    for _ in range(3):
        await after.advance(60)
        assert await agent.heartbeat(job_id, {"step": 5, "total": 10})
    await agent.report(job_id, "running", {"step": 9, "total": 10})
    await agent.report(job_id, "completed", {"step": 10, "total": 10})

    job = await after.job(job_id)
    assert (job.state, job.attempts, job.worker_id) == ("completed", 1, agent.worker_id)
    assert job.progress == {"step": 10, "total": 10}
    kinds = await after.timeline_kinds(job_id)
    assert kinds == ["submitted", "dispatched", "started", "completed"]
    [attempt] = await after.attempts(job_id)
    assert attempt.outcome == "completed"
    assert after.worker_state(agent.worker_id) == "idle"


async def test_a_worker_that_does_not_come_back_has_its_job_requeued(
    harness: FleetHarness,
) -> None:
    gone = await harness.agent("gone")
    job_id = await _running_job(harness, gone)
    spare = await harness.agent("spare")
    assert spare.submitted_jobs() == []

    after = await harness.restart(5.0, gone, spare)
    await spare.register()
    await spare.connect(spare.last_event_id)
    timeout = after.settings.heartbeat_timeout_s
    await after.advance(timeout / 2)
    await spare.heartbeat()
    await after.advance(timeout / 2 - 0.001)
    assert after.worker_state(gone.worker_id) == "busy", "it has the whole timeout to return"
    assert await after.job_state(job_id) == "running"

    await after.advance(0.001)
    assert after.worker_state(gone.worker_id) == "offline"
    job = await after.job(job_id)
    assert (job.state, job.worker_id, job.attempts) == ("dispatched", spare.worker_id, 2)
    first = (await after.attempts(job_id))[0]
    assert first.outcome == "lost"
    assert first.reason is not None and gone.worker_id in first.reason
    assert spare.submitted_jobs() == [job_id]
    await spare.run_to_completion(job_id)
    assert await after.job_state(job_id) == "completed"


async def test_a_dispatch_the_agent_never_acknowledged_is_pushed_again(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit()
    agent.forget()  # the job_submit never reached the agent

    after = await harness.restart(5.0, agent)
    assert await after.job_state(job_id) == "dispatched"
    await agent.rejoin_and_run_pushed_job(job_id)


async def test_unacknowledged_dispatches_still_spend_no_retry_after_a_restart(
    harness: FleetHarness,
) -> None:
    """Read back from the timeline, like a closed stream's: a max_retries=0 job keeps
    going, and the bound counts the dispatches before the restart too."""
    agent = await harness.agent("w1")
    job_id = await harness.submit(max_retries=0)
    for _ in range(MAX_UNDELIVERED - 1):
        assert await agent.heartbeat() is True
        await harness.advance(harness.settings.dispatch_ack_timeout_s)
    assert (await harness.job(job_id)).attempts == MAX_UNDELIVERED
    assert await harness.job_state(job_id) == "dispatched"

    after = await harness.restart(5.0, agent)
    reply = await agent.register(current_job_id=None)  # it dropped the job_submit again
    assert (reply["resume_job"], reply["abandon_job"]) == (None, None)
    await agent.connect(None)
    await after.settle()
    assert agent.submitted_jobs()[-1] == job_id
    await after.advance(after.settings.dispatch_ack_timeout_s)
    job = await after.job(job_id)
    assert job.state == "failed"
    assert job.error is not None
    assert job.error.startswith(f"dispatched {MAX_UNDELIVERED} times and never acknowledged")


async def test_a_reconnecting_stream_gets_a_dispatch_pushed_again_after_a_restart(
    harness: FleetHarness,
) -> None:
    """Without registering again: the stream reconnects with the last id it saw."""
    agent = await harness.agent("w1")
    seen = agent.last_event_id
    job_id = await harness.submit()
    agent.forget()  # lost with the old connection

    after = await harness.restart(5.0, agent)
    await agent.connect(seen)
    await after.settle()
    [submit] = agent.received("job_submit")
    assert submit.data["job_id"] == job_id
    assert seen is None or (submit.event_id or 0) > seen
    await agent.run_to_completion(job_id)
    assert await after.job_state(job_id) == "completed"


async def test_pending_jobs_are_scheduled_again(harness: FleetHarness) -> None:
    jobs = [await harness.submit(priority=p) for p in (0, 5, 1)]
    assert {await harness.job_state(j) for j in jobs} == {"pending"}

    after = await harness.restart(5.0)
    agent = await after.agent("late")
    # One worker: the highest priority goes first, then the others in priority order.
    order: list[str] = []
    for _ in jobs:
        [job_id] = agent.submitted_jobs()[len(order) :]
        order.append(job_id)
        await agent.run_to_completion(job_id)
    assert order == [jobs[1], jobs[2], jobs[0]]
    assert {await after.job_state(j) for j in jobs} == {"completed"}


async def test_nothing_submitted_is_lost_across_a_restart(harness: FleetHarness) -> None:
    a = await harness.agent("a")
    b = await harness.agent("b")
    done = await harness.submit()
    holder = a if a.submitted_jobs() == [done] else b
    await holder.run_to_completion(done)
    running = await harness.submit()
    dispatched = await harness.submit()
    pending = [await harness.submit() for _ in range(3)]
    runner = a if running in a.submitted_jobs() else b
    await runner.report(running, "running")
    other = b if runner is a else a
    assert other.submitted_jobs()[-1] == dispatched

    after = await harness.restart(30.0, a, b)
    await runner.register(current_job_id=running)
    await runner.connect(runner.last_event_id)
    await other.register(current_job_id=None)
    await other.connect(other.last_event_id)
    await after.settle()

    submitted = [done, running, dispatched, *pending]
    for _ in range(20):  # each agent finishes whatever it holds until the queue is empty
        progressed = False
        for agent in (a, b):
            held = after.worker(agent.worker_id).current_job_id
            if held is not None:
                if await after.job_state(held) == "dispatched":
                    await agent.report(held, "starting")
                await agent.report(held, "completed")
                progressed = True
        if not progressed:
            break
    for job_id in submitted:
        job = await after.job(job_id)
        assert job.state == "completed", job
        kinds = await after.timeline_kinds(job_id)
        assert kinds.count("completed") == 1 and kinds.count("dispatched") == 1, kinds
    assert await after.store.count_jobs() == len(submitted)


async def test_a_drain_survives_a_restart(harness: FleetHarness) -> None:
    agent = await harness.agent("w1")
    await harness.fleet.drain(agent.worker_id, actor="admin")
    after = await harness.restart(5.0, agent)
    await agent.register()
    await agent.connect(agent.last_event_id)
    await after.settle()
    assert after.worker_state(agent.worker_id) == "draining"
    assert len(agent.received("drain")) == 2, "told again on the new stream"
    job_id = await after.submit()
    assert await after.job_state(job_id) == "pending"


async def test_a_cancel_requested_before_a_restart_still_ends_the_job_cancelled(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await _running_job(harness, agent)
    await harness.fleet.cancel(job_id, actor="alice")
    await harness.settle()
    assert len(agent.received("job_cancel")) == 1

    after = await harness.restart(5.0, agent)
    await agent.register(current_job_id=job_id)
    await agent.connect(agent.last_event_id)
    await agent.report(job_id, "cancelled")
    job = await after.job(job_id)
    assert (job.state, job.attempts) == ("cancelled", 1), job
    kinds = await after.timeline_kinds(job_id)
    assert kinds == ["submitted", "dispatched", "started", "stop_requested", "cancelled"]
    assert (await after.timeline(job_id))[3].detail == {
        "reason": "cancelled by alice",
        "timeout": False,
    }


async def test_a_stop_unconfirmed_across_a_restart_ends_at_the_new_grace_period(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await _running_job(harness, agent)
    await harness.fleet.cancel(job_id, actor="alice")
    after = await harness.restart(5.0, agent)
    await agent.register(current_job_id=job_id)
    await agent.connect(None)
    await after.settle()
    assert [e.data["job_id"] for e in agent.received("job_cancel")] == [job_id, job_id]
    grace = after.settings.cancel_grace_s
    await after.advance(grace - 0.001)
    assert await after.job_state(job_id) == "running"
    await agent.heartbeat(job_id)
    await after.advance(0.001)
    job = await after.job(job_id)
    assert job.state == "cancelled"
    assert job.error == "cancelled by alice (the worker did not confirm the stop)"
    assert after.worker_state(agent.worker_id) == "idle"


async def test_a_dispatch_cancelled_before_a_restart_is_not_pushed_again(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit()
    await harness.fleet.cancel(job_id, actor="alice")
    agent.forget()
    after = await harness.restart(5.0, agent)
    await agent.register(current_job_id=None)
    await agent.connect(None)
    await after.settle()
    assert agent.submitted_jobs() == []
    assert [e.data["job_id"] for e in agent.received("job_cancel")] == [job_id]
    await after.advance(after.settings.cancel_grace_s)
    job = await after.job(job_id)
    assert (job.state, job.attempts) == ("cancelled", 1)


async def test_a_job_whose_worker_was_already_offline_at_the_restart_is_requeued(
    harness: FleetHarness,
) -> None:
    """A crash between the worker's loss and its job's requeue (two transactions)."""
    gone = await harness.agent("gone")
    job_id = await _running_job(harness, gone)
    spare = await harness.agent("spare")
    await harness.close()
    db = await open_database(None, harness.data_dir)
    # Its row says idle (written at registration; a dispatch does not write it).
    assert await Store(db).cas_worker_state(gone.worker_id, "idle", "offline")
    await db.close()
    after = await harness.restart(5.0, gone, spare)

    await spare.register()
    await spare.connect(spare.last_event_id)
    await after.settle()
    await after.advance(after.settings.heartbeat_timeout_s / 2)
    await spare.heartbeat()
    await after.advance(after.settings.heartbeat_timeout_s / 2)
    job = await after.job(job_id)
    assert (job.state, job.worker_id) == ("dispatched", spare.worker_id), job
    assert after.worker(gone.worker_id).current_job_id is None
    first = (await after.attempts(job_id))[0]
    assert first.outcome == "lost" and first.reason is not None
    assert f"worker {gone.worker_id} lost: offline when the orchestrator restarted" == first.reason
    # When the lost worker does come back, it is told to abandon the job.
    reply = await gone.register(current_job_id=job_id)
    assert reply["abandon_job"] == job_id
    assert after.worker_state(gone.worker_id) == "idle"


async def test_events_queued_after_a_restart_reach_an_agent_that_saw_later_ids_before(
    harness: FleetHarness,
) -> None:
    """Event ids keep increasing across a restart, so Last-Event-ID replay never skips
    an event the agent has not seen."""
    agent = await harness.agent("w1")
    job_id = await _running_job(harness, agent)
    await harness.fleet.drain(agent.worker_id, actor="admin")  # a drain, then a restart
    agent.read()
    seen = agent.last_event_id
    after = await harness.restart(5.0, agent)
    await after.fleet.cancel(job_id, actor="alice")  # queued while the agent is away
    await agent.register(current_job_id=job_id)
    await agent.connect(seen)
    await after.settle()
    cancels = agent.received("job_cancel")
    assert [e.data["job_id"] for e in cancels] == [job_id]
    assert seen is not None and (cancels[0].event_id or 0) > seen


async def test_a_worker_row_still_busy_with_a_requeued_job_is_free_after_a_restart(
    harness: FleetHarness,
) -> None:
    """A crash between a job's requeue and its worker's release (two transactions)."""
    agent = await harness.agent("w1")
    job_id = await _running_job(harness, agent)
    await harness.close()
    db = await open_database(None, harness.data_dir)
    assert await Store(db).cas_job_state(job_id, "running", "pending", worker_id=None)
    await db.close()
    after = await harness.restart(5.0, agent)
    assert after.worker_state(agent.worker_id) == "idle"
    # The agent's stream comes back (it does not register again): it gets the job.
    await agent.connect(agent.last_event_id)
    await after.settle()
    assert (await after.job(job_id)).worker_id == agent.worker_id


async def test_a_worker_freed_by_its_jobs_end_is_free_after_a_restart(
    harness: FleetHarness,
) -> None:
    """Freeing a worker writes nothing of its own: the job's end commit is what a restart
    reads, whatever the worker's row last said."""
    agent = await harness.agent("w1")
    job_id = await _running_job(harness, agent)
    before = harness.db.stats.writes
    await agent.report(job_id, "completed")
    assert harness.db.stats.writes - before == 1  # the job's end alone
    assert harness.worker_state(agent.worker_id) == "idle"

    after = await harness.restart(5.0, agent)
    assert after.worker_state(agent.worker_id) == "idle"
    assert after.worker(agent.worker_id).current_job_id is None
    await agent.connect(agent.last_event_id)  # the stream comes back without registering
    await after.settle()
    next_job = await after.submit()
    assert agent.submitted_jobs()[-1] == next_job
    await agent.run_to_completion(next_job)
    assert await after.job_state(next_job) == "completed"


async def test_a_draining_worker_freed_by_its_jobs_end_stays_draining_after_a_restart(
    harness: FleetHarness,
) -> None:
    """Its row was last written by the drain, still holding the job: the restart keeps
    the drain and frees it of the ended job."""
    agent = await harness.agent("w1")
    job_id = await _running_job(harness, agent)
    await harness.fleet.drain(agent.worker_id, actor="admin")
    await agent.report(job_id, "completed")
    row = await harness.store.get_worker(agent.worker_id)
    assert row is not None and (row.state, row.current_job_id) == ("draining", job_id)

    after = await harness.restart(5.0, agent)
    assert after.worker_state(agent.worker_id) == "draining"
    assert after.worker(agent.worker_id).current_job_id is None
    reply = await agent.register()
    assert (reply["resume_job"], reply["abandon_job"]) == (None, None)
    await agent.connect(agent.last_event_id)
    waiting = await after.submit()
    assert await after.job_state(waiting) == "pending"
    await after.fleet.resume(agent.worker_id, actor="admin")
    await after.settle()
    assert agent.submitted_jobs()[-1] == waiting


async def test_a_worker_freed_by_a_requeue_is_free_after_a_restart(
    harness: FleetHarness,
) -> None:
    """The requeue's commit frees the worker: after a restart it holds nothing."""
    agent = await harness.agent("w1")
    job_id = await _running_job(harness, agent)
    await harness.fleet.drain(agent.worker_id, actor="admin")  # so the job is not re-placed
    await agent.report(job_id, "cancelled", error="agent shutting down")  # not asked to stop
    assert await harness.job_state(job_id) == "pending"
    assert harness.worker(agent.worker_id).current_job_id is None

    after = await harness.restart(5.0, agent)
    assert after.worker_state(agent.worker_id) == "draining"
    assert after.worker(agent.worker_id).current_job_id is None
    assert await after.job_state(job_id) == "pending"
    reply = await agent.register(current_job_id=job_id)
    assert reply["abandon_job"] == job_id


async def test_event_ids_keep_rising_across_a_restart_though_pushes_write_no_id(
    harness: FleetHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ids are reserved in blocks ahead of use: the row always covers every id sent, a
    push writes nothing, and a restart counts on from the reserved ceiling."""
    monkeypatch.setattr(worker_actor, "EVENT_ID_BLOCK", 10)
    monkeypatch.setattr(worker_actor, "EVENT_IDS_PER_MESSAGE", 3)
    agent = await harness.agent("w1")
    for _ in range(12):  # each drain pushes one event
        await harness.fleet.drain(agent.worker_id, actor="admin")
        await harness.fleet.resume(agent.worker_id, actor="admin")
        await harness.settle()
        agent.read()
        row = await harness.store.get_worker(agent.worker_id)
        seen = agent.last_event_id or 0
        assert row is not None and seen <= row.last_event_id <= seen + 10
    job_id = await harness.submit()
    assert agent.submitted_jobs() == [job_id]
    seen = agent.last_event_id
    assert seen is not None and seen >= 12

    after = await harness.restart(5.0, agent)
    await agent.register(current_job_id=job_id)
    await agent.connect(seen)
    await after.fleet.cancel(job_id, actor="alice")
    await after.settle()
    [cancel] = agent.received("job_cancel")
    assert (cancel.event_id or 0) > seen


async def test_a_push_right_after_a_reservation_runs_out_waits_for_the_next_one(
    harness: FleetHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reservation is written before the message that needs it is handled, so the
    row is ahead of the stream even at the instant of a crash."""
    monkeypatch.setattr(worker_actor, "EVENT_ID_BLOCK", 4)
    monkeypatch.setattr(worker_actor, "EVENT_IDS_PER_MESSAGE", 2)
    agent = await harness.agent("w1")
    ceilings = set()
    for _ in range(6):
        job_id = await harness.submit()
        [pushed] = [e for e in agent.received("job_submit") if e.data["job_id"] == job_id]
        row = await harness.store.get_worker(agent.worker_id)
        assert row is not None and (pushed.event_id or 0) <= row.last_event_id
        ceilings.add(row.last_event_id)
        await agent.run_to_completion(job_id)
    assert len(ceilings) > 1, "reserved again as the block ran out"


async def test_a_last_event_id_above_the_servers_gets_every_kept_event(
    harness: FleetHarness,
) -> None:
    """An id this server never handed out (a database restored from a backup): the agent
    is sent everything not yet acknowledged rather than nothing."""
    agent = await harness.agent("w1")
    job_id = await harness.submit()
    agent.forget()
    after = await harness.restart(5.0, agent)
    await agent.connect(10**9)
    await after.settle()
    assert agent.submitted_jobs() == [job_id]


async def test_no_event_goes_out_with_an_id_the_row_does_not_cover(
    harness: FleetHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the next block cannot be reserved (a write refused), the message that would
    need it fails before it is handled: nothing is sent under an unreserved id."""
    monkeypatch.setattr(worker_actor, "EVENT_ID_BLOCK", 4)
    monkeypatch.setattr(worker_actor, "EVENT_IDS_PER_MESSAGE", 2)
    agent = await harness.agent("w1")

    async def refused(worker_id: str, last_event_id: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(harness.ctx.persistence, "save_worker_event_id", refused)
    with pytest.raises(OSError):
        for _ in range(5):  # each drain pushes one event, until the block runs out
            await harness.fleet.drain(agent.worker_id, actor="admin")
            await harness.fleet.resume(agent.worker_id, actor="admin")
    agent.read()
    row = await harness.store.get_worker(agent.worker_id)
    assert row is not None and agent.last_event_id is not None
    assert agent.last_event_id <= row.last_event_id
    assert harness.worker(agent.worker_id).outbox.last_event_id <= row.last_event_id


async def test_a_worker_whose_start_could_not_reserve_ids_reserves_at_its_first_message(
    harness: FleetHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    persistence = harness.ctx.persistence
    save = persistence.save_worker_event_id
    refusals: list[str] = []

    async def refused_once(worker_id: str, last_event_id: int) -> None:
        if not refusals:
            refusals.append(worker_id)
            raise OSError("disk full")
        await save(worker_id, last_event_id)

    monkeypatch.setattr(persistence, "save_worker_event_id", refused_once)
    worker_id = await harness.create_worker("w1")
    await harness.settle()
    assert refusals == [worker_id]
    row = await harness.store.get_worker(worker_id)
    assert row is not None and row.last_event_id == 0
    assert harness.worker(worker_id).alive

    await harness.fleet.drain(worker_id, actor="admin")  # its first event, after a reservation
    row = await harness.store.get_worker(worker_id)
    assert row is not None and row.last_event_id >= 1
    assert harness.worker(worker_id).outbox.last_event_id <= row.last_event_id
