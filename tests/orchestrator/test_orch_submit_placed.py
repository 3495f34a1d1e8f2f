"""A job submitted while an idle connected worker fits it is placed before it is first
written: the job, its attempt, both timeline entries and both audit events go in ONE
commit, and the job_submit is pushed only after it. A final report's numbers join the
end's commit too. Counted in writes, never timed."""

from __future__ import annotations

import asyncio
import json

import peewee as pw
import pytest
from orchestrator_testkit import FleetHarness, Storage, job_record

from tunefleet.actors import messages as m
from tunefleet.actors.events import HubEvent
from tunefleet.actors.records import JobRecord
from tunefleet.actors.runtime import Actor
from tunefleet.actors.worker_actor import WorkerActor

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def storage() -> Storage:
    """SQLite: these count the database's writes, fence it and restart from it."""
    return "sqlite"


class FenceRefuses(Exception):
    """Stands for the HA fence refusing a write group (a newer term took over)."""


def _refuse(database: pw.Database) -> None:
    raise FenceRefuses("a newer leader holds the fleet")


async def test_a_job_a_free_worker_fits_is_stored_dispatched_in_one_write(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    before = harness.db.stats
    reply = await harness.fleet.submit(job_record(), actor="tester")
    await harness.settle()
    after = harness.db.stats
    job_id = str(reply["job_id"])
    assert (reply["status"], reply["allocated_worker_id"]) == ("dispatched", agent.worker_id)
    # One write for the job (submitted and dispatched together), none for the worker's
    # row: the job table says who holds what, and the event's id was reserved before.
    assert after.writes - before.writes == 1
    assert after.write_groups - before.write_groups == 1
    assert agent.submitted_jobs() == [job_id]
    job = await harness.job(job_id)
    assert (job.state, job.worker_id, job.attempts) == ("dispatched", agent.worker_id, 1)
    assert job.wait_reason is None
    assert job.dispatched_at == job.submitted_at
    assert await harness.timeline_kinds(job_id) == ["submitted", "dispatched"]
    [attempt] = await harness.attempts(job_id)
    assert (attempt.number, attempt.worker_id) == (1, agent.worker_id)
    kinds = [e.kind for e in await harness.store.list_audit(target=job_id, newest_first=False)]
    assert kinds == ["job.submitted", "job.dispatched"]
    assert await harness.store.verify_audit() == (True, None)
    lines = [json.loads(line) for line in harness.audit.path.read_text("utf-8").splitlines()]
    assert [line["kind"] for line in lines if line["target"] == job_id] == kinds
    assert harness.worker_state(agent.worker_id) == "busy"

    await agent.run_to_completion(job_id)
    assert await harness.job_state(job_id) == "completed"
    assert harness.worker_state(agent.worker_id) == "idle"


async def test_a_placed_submission_is_answered_from_what_it_stored_without_asking_the_job(
    harness: FleetHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer (and the UI's job event) is the dispatch just committed: no Snapshot
    ask to the new job actor, no queue questions to the scheduler."""
    agent = await harness.agent("w1")
    asked: list[str] = []
    ask = Actor.ask

    async def counting_ask(self: Actor, message: object, timeout_s: float = 5.0) -> object:
        asked.append(type(message).__name__)
        return await ask(self, message, timeout_s)

    monkeypatch.setattr(Actor, "ask", counting_ask)
    with harness.ctx.hub.subscribe(frozenset({"job"})) as events:
        reply = await harness.fleet.submit(job_record(), actor="tester")
        published = events.queue.get_nowait()
    assert asked == ["PlaceNewJob", "ReserveForJob", "PushJob"]
    assert reply == {
        "success": True,
        "job_id": reply["job_id"],
        "status": "dispatched",
        "allocated_worker_id": agent.worker_id,
        "queue_position": None,
        "reason": None,
        "error": None,
    }
    assert published.data["job_id"] == reply["job_id"]
    assert {e.data["status"] for e in [published, *_drain(events.queue)]} == {"dispatched"}
    await harness.settle()
    assert await harness.job_state(str(reply["job_id"])) == "dispatched"


async def test_a_placed_job_submit_never_uses_an_event_id_not_yet_stored(
    harness: FleetHarness,
) -> None:
    """The idle worker answers the reservation and the push at once only while its next
    event ids are stored; with none left they go through its mailbox, which stores a
    new block first. Either way the job_submit's id is below the stored ceiling, so an
    agent's Last-Event-ID stays valid after a restart."""
    agent = await harness.agent("w1")
    worker = harness.worker(agent.worker_id)
    for spent in (False, True):
        if spent:  # as after many events: no id left below the stored ceiling
            ceiling = worker.outbox.last_event_id
            await harness.ctx.persistence.save_worker_event_id(agent.worker_id, ceiling)
            worker.event_ids_reserved = ceiling
        job_id = await harness.submit()
        [event] = [e for e in agent.received("job_submit") if e.data["job_id"] == job_id]
        row = await harness.store.get_worker(agent.worker_id)
        assert row is not None
        assert event.event_id is not None and event.event_id <= row.last_event_id
        assert worker.event_ids_reserved == row.last_event_id
        await agent.run_to_completion(job_id)


async def test_a_workers_snapshot_is_built_for_the_pages_only_while_one_listens(
    harness: FleetHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job cycle publishes the worker's changes (reserved, released): the snapshot is
    built then only when a subscriber takes worker events, and it reaches that one."""
    agent = await harness.agent("w1")
    built: list[str] = []
    snapshot = WorkerActor.snapshot

    def counting_snapshot(self: WorkerActor) -> dict[str, object]:
        built.append(self.worker_id)
        return snapshot(self)

    monkeypatch.setattr(WorkerActor, "snapshot", counting_snapshot)
    await agent.run_to_completion(await harness.submit())
    await harness.settle()
    assert built == []

    with harness.ctx.hub.subscribe(frozenset({"worker"})) as events:
        await agent.run_to_completion(await harness.submit())
        await harness.settle()
        published = _drain(events.queue)
    assert built and set(built) == {agent.worker_id}
    assert [e.data["worker"]["status"] for e in published][:1] == ["busy"]
    assert published[-1].data["worker"]["status"] == "idle"


def _drain(queue: asyncio.Queue[HubEvent]) -> list[HubEvent]:
    events = []
    while not queue.empty():
        events.append(queue.get_nowait())
    return events


async def test_a_job_no_free_worker_fits_is_queued_then_dispatched_in_a_write_of_its_own(
    harness: FleetHarness,
) -> None:
    small = await harness.agent("small")
    before = harness.db.stats.writes
    job_id = await harness.submit(gpu_count=2)
    assert small.submitted_jobs() == []
    job = await harness.job(job_id)
    assert job.state == "pending"
    assert job.wait_reason is not None and "needs 2" in job.wait_reason
    assert harness.db.stats.writes - before == 1  # the job, its wait reason stored with it

    big = await harness.agent("big", gpu={"name": "A100", "vram_gb": 80.0, "count": 2})
    assert big.submitted_jobs() == [job_id]
    assert await harness.timeline_kinds(job_id) == ["submitted", "dispatched"]


async def test_a_queued_submission_is_one_write_and_one_ask_after_it(
    harness: FleetHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No worker fits: the scheduler's no says why, and that reason is stored with the
    job; one ask then queues it and answers its place. The job's actor is not asked."""
    await harness.agent("small")
    await harness.submit(gpu_count=2)  # one ahead of it, same priority
    asked: list[str] = []
    ask = Actor.ask

    async def counting_ask(self: Actor, message: object, timeout_s: float = 5.0) -> object:
        asked.append(type(message).__name__)
        return await ask(self, message, timeout_s)

    monkeypatch.setattr(Actor, "ask", counting_ask)
    before = harness.db.stats
    with harness.ctx.hub.subscribe(frozenset({"job"})) as events:
        reply = await harness.fleet.submit(job_record(gpu_count=2), actor="tester")
        published = events.queue.get_nowait()
    await harness.settle()
    assert harness.db.stats.writes - before.writes == 1
    assert harness.db.stats.write_groups - before.write_groups == 1
    assert asked == ["PlaceNewJob", "QueueNewJob"]
    job_id = str(reply["job_id"])
    job = await harness.job(job_id)
    assert job.wait_reason is not None and "needs 2" in job.wait_reason
    assert reply == {
        "success": True,
        "job_id": job_id,
        "status": "pending",
        "allocated_worker_id": None,
        "queue_position": 2,
        "reason": job.wait_reason,
        "error": None,
    }
    assert published.data == {"job_id": job_id, "status": "pending"}
    assert await harness.fleet.position(job_id) == {
        "job_id": job_id,
        "position": 2,
        "status": "pending",
        "reason": job.wait_reason,
    }
    kinds = [e.kind for e in await harness.store.list_audit(target=job_id, newest_first=False)]
    assert kinds == ["job.submitted"]


async def test_a_worker_free_between_the_placement_and_the_queueing_is_in_the_answer(
    harness: FleetHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its stream opens while the job is being written: the queueing's pass dispatches
    the job, and the answer says so with the worker, as the job's actor has it."""
    agent = await harness.agent("w1", connect=False)
    create_job = harness.ctx.persistence.create_job

    async def connect_meanwhile(*args: object) -> object:
        stored = await create_job(*args)  # type: ignore[arg-type]
        await agent.connect()
        return stored

    monkeypatch.setattr(harness.ctx.persistence, "create_job", connect_meanwhile)
    reply = await harness.fleet.submit(job_record(), actor="tester")
    await harness.settle()
    job_id = str(reply["job_id"])
    assert (reply["status"], reply["allocated_worker_id"]) == ("dispatched", agent.worker_id)
    assert (reply["queue_position"], reply["reason"]) == (None, None)
    assert agent.submitted_jobs() == [job_id]
    job = await harness.job(job_id)
    assert (job.state, job.wait_reason) == ("dispatched", None)  # the dispatch cleared it
    # The submission's audit line is written after the queueing, yet before the dispatch's.
    kinds = [e.kind for e in await harness.store.list_audit(target=job_id, newest_first=False)]
    assert kinds == ["job.submitted", "job.dispatched"]
    lines = [json.loads(line) for line in harness.audit.path.read_text("utf-8").splitlines()]
    assert [line["kind"] for line in lines if line["target"] == job_id] == kinds
    assert await harness.store.verify_audit() == (True, None)


async def test_a_reason_changed_before_the_queueing_is_stored_as_answered(
    harness: FleetHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that cannot take it connects while it is being written: the reason the
    answer gives (and the queue shows) replaces the one stored, in a write of its own."""
    small = await harness.agent("small", connect=False)
    create_job = harness.ctx.persistence.create_job
    stored_reasons: list[str | None] = []

    async def connect_meanwhile(rec: JobRecord, *args: object) -> object:
        stored = await create_job(rec, *args)  # type: ignore[arg-type]
        stored_reasons.append(rec.wait_reason)
        await small.connect()
        return stored

    monkeypatch.setattr(harness.ctx.persistence, "create_job", connect_meanwhile)
    before = harness.db.stats.writes
    reply = await harness.fleet.submit(job_record(gpu_count=2), actor="tester")
    await harness.settle()
    assert stored_reasons[0] is not None and "needs 2" not in stored_reasons[0]
    assert reply["status"] == "pending" and reply["queue_position"] == 1
    assert reply["reason"] is not None and "needs 2" in str(reply["reason"])
    job = await harness.job(str(reply["job_id"]))
    assert job.wait_reason == reply["reason"]
    assert harness.db.stats.writes - before == 2


async def test_a_queued_jobs_stored_reason_survives_a_restart_until_it_is_dispatched(
    harness: FleetHarness,
) -> None:
    small = await harness.agent("small")
    job_id = await harness.submit(gpu_count=2)
    reason = (await harness.job(job_id)).wait_reason
    assert reason is not None and "needs 2" in reason
    after = await harness.restart(5.0, small)

    assert await after.job_state(job_id) == "pending"
    assert (await after.job(job_id)).wait_reason == reason
    await small.connect()
    await after.settle()
    assert (await after.fleet.position(job_id))["reason"] == reason
    big = await after.agent("big", gpu={"name": "A100", "vram_gb": 80.0, "count": 2})
    assert big.submitted_jobs() == [job_id]
    job = await after.job(job_id)
    assert (job.state, job.wait_reason) == ("dispatched", None)


async def test_a_new_job_does_not_take_a_worker_an_older_pending_job_fits(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1", connect=False)
    older = await harness.submit()
    assert await harness.job_state(older) == "pending"
    # The worker's stream opens and a new job comes in at once: the older job is owed
    # that worker (tests/actors/test_scheduler_place_new.py holds the scheduler's side).
    await agent.connect()
    newer = (await harness.fleet.submit(job_record(), actor="tester"))["job_id"]
    await harness.settle()
    assert agent.submitted_jobs() == [older]
    assert await harness.job_state(newer) == "pending"
    await agent.run_to_completion(older)
    assert agent.submitted_jobs() == [older, newer]


async def test_a_refused_commit_stores_nothing_pushes_nothing_and_frees_the_worker(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    harness.db.set_write_fence(_refuse)
    with pytest.raises(FenceRefuses):
        await harness.fleet.submit(job_record(), actor="tester")
    await harness.settle()
    harness.db.set_write_fence(None)
    assert agent.submitted_jobs() == []
    assert harness.ctx.jobs == {}
    assert await harness.store.list_jobs() == []
    assert harness.worker_state(agent.worker_id) == "idle"
    assert harness.worker(agent.worker_id).current_job_id is None

    job_id = await harness.submit()  # the worker was given back to the scheduler
    assert agent.submitted_jobs() == [job_id]


async def test_a_push_that_crashes_the_worker_still_answers_the_stored_job_dispatched(
    harness: FleetHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job is committed before its push: a bug that crashes the worker actor on the
    push (logged and recovered by the actor) must not answer the submitter with an error
    for a job that is stored. The acknowledgement timeout takes the job back, undelivered,
    and the next dispatch reaches the worker."""
    agent = await harness.agent("w1")
    real_push = WorkerActor.on_push_job
    crashes: list[str] = []

    def crash_once(self: WorkerActor, msg: m.PushJob) -> None:
        if not crashes:
            crashes.append(msg.job_id)
            raise RuntimeError("a bug in the push")
        real_push(self, msg)

    monkeypatch.setattr(WorkerActor, "on_push_job", crash_once)
    reply = await harness.fleet.submit(job_record(), actor="tester")
    job_id = str(reply["job_id"])
    assert (reply["status"], reply["allocated_worker_id"]) == ("dispatched", agent.worker_id)
    await harness.settle()
    assert crashes == [job_id]
    assert agent.submitted_jobs() == []
    assert await harness.job_state(job_id) == "dispatched"

    await harness.advance(harness.settings.dispatch_ack_timeout_s)
    assert agent.submitted_jobs() == [job_id]
    assert [a.outcome for a in await harness.attempts(job_id)][:1] == ["undelivered"]


async def test_a_worker_that_declines_the_reservation_leaves_the_job_queued(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    # Taken by another job behind the scheduler's back: the reservation is refused.
    assert await harness.worker(agent.worker_id).ask(m.ReserveForJob("j_elsewhere"))
    job_id = await harness.submit()
    assert await harness.job_state(job_id) == "pending"
    assert agent.submitted_jobs() == []
    await harness.worker(agent.worker_id).ask(m.CancelReservation("j_elsewhere"))
    await harness.settle()
    assert agent.submitted_jobs() == [job_id]
    assert await harness.timeline_kinds(job_id) == ["submitted", "dispatched"]


async def test_a_job_stored_dispatched_survives_a_restart_its_worker_row_never_heard_of(
    harness: FleetHarness,
) -> None:
    """A dispatch writes the job, not the worker's row: the job table is the authority,
    so after a restart the worker holds the job again and gets it pushed again."""
    agent = await harness.agent("w1")
    job_id = await harness.submit()
    agent.forget()  # the job_submit never reached the agent
    row = await harness.store.get_worker(agent.worker_id)
    assert row is not None and (row.state, row.current_job_id) == ("idle", None)
    after = await harness.restart(5.0, agent)

    assert after.worker_state(agent.worker_id) == "busy"
    assert await after.job_state(job_id) == "dispatched"
    await agent.rejoin_and_run_pushed_job(job_id)
    assert await after.timeline_kinds(job_id) == ["submitted", "dispatched", "started", "completed"]


async def test_a_final_report_with_numbers_stores_its_point_in_the_end_commit(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job()
    before = harness.db.stats.writes
    await agent.report(job_id, "completed", {"step": 3, "total": 3, "loss": 0.25})
    # The job's end with its last metric point; freeing the worker writes nothing more.
    assert harness.db.stats.writes - before == 1
    assert await harness.job_state(job_id) == "completed"
    points = await harness.store.read_metrics(job_id)
    assert [(p.attempt, p.step, p.values) for p in points] == [(1, 3, {"loss": 0.25})]


async def test_an_agent_that_stops_a_job_on_its_own_still_keeps_its_last_numbers(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job()
    await agent.report(job_id, "cancelled", {"step": 2, "loss": 0.5})  # not asked to stop
    assert await harness.job_state(job_id) in ("pending", "dispatched")  # back in the queue
    points = await harness.store.read_metrics(job_id)
    assert [(p.attempt, p.step, p.values) for p in points] == [(1, 2, {"loss": 0.5})]
