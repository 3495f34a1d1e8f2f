"""Issue 26 through the actors: every attempt's end has a kind, infrastructure failures
have their own budget, a poison job fails after two workers, retries keep off the
workers they failed on, and a bad machine is quarantined (and released by hand)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from orchestrator_testkit import FakeAgent, FleetHarness, Storage

from tunefleet.actors import messages as m
from tunefleet.actors.context import FleetSettings
from tunefleet.actors.quarantine_policy import QuarantineRule
from tunefleet.errors import Conflict

CUDA = "exit code 1: RuntimeError: CUDA error: an illegal memory access was encountered"
POISON = "exit code 1: ValueError: expected 4 channels in /data/a.pt, got 3"


@pytest.fixture
def storage() -> Storage:
    return "sqlite"  # one test restarts the orchestrator


async def fail(
    agent: FakeAgent, job_id: str, error: str, failure: dict[str, Any] | None = None
) -> None:
    """The agent runs ``job_id`` and reports it failed, with its evidence."""
    await agent.report(job_id, "running")
    fleet = agent.harness.fleet
    reply = await fleet.report_status(
        agent.worker_id,
        job_id,
        m.StatusReported(agent.worker_id, "failed", None, error, failure=failure),
    )
    if reply.get("release_hold"):
        fleet.report_written(agent.worker_id, job_id)
    await agent.harness.settle()


async def pass_minutes(agent: FakeAgent, minutes: int) -> None:
    """Time passes; the agent keeps heartbeating."""
    for _ in range(minutes):
        await agent.harness.advance(60)
        await agent.heartbeat()


async def test_a_lost_worker_spends_the_infrastructure_budget_not_a_retry(
    harness: FleetHarness,
) -> None:
    first = await harness.agent("first")
    job_id = await harness.submit(max_retries=0)
    await first.report(job_id, "running")
    second = await harness.agent("second")
    with harness.ctx.hub.subscribe(frozenset({"job"})) as events:
        await first.disconnect()
        published = [events.queue.get_nowait() for _ in range(events.queue.qsize())]
    job = await harness.job(job_id)
    # max_retries=0, and still retried: a lost worker is not the job's fault.
    assert (job.state, job.worker_id) == ("dispatched", second.worker_id)
    # Followers read "attempt 1 of 1 (1 infrastructure)", not "2 of 1".
    last = published[-1].data
    assert (last["attempt"], last["infrastructure_failures"]) == (2, 1)
    [lost] = [a for a in await harness.attempts(job_id) if a.number == 1]
    assert (lost.outcome, lost.kind) == ("lost", "infrastructure")
    await second.run_to_completion(job_id)
    attempts = await harness.attempts(job_id)
    assert [(a.outcome, a.kind) for a in attempts] == [
        ("lost", "infrastructure"),
        ("completed", None),
    ]


@pytest.fixture
def settings() -> FleetSettings:
    return FleetSettings(local_runner=False, infra_retries=1)


async def test_past_its_infrastructure_budget_the_job_fails_saying_so(
    harness: FleetHarness,
) -> None:
    agents = [await harness.agent(f"w{i}") for i in range(3)]
    job_id = await harness.submit(max_retries=3)
    for _ in range(2):  # infra_retries=1: the second infrastructure failure fails it
        job = await harness.job(job_id)
        agent = next(a for a in agents if a.worker_id == job.worker_id)
        await fail(agent, job_id, CUDA)
    job = await harness.job(job_id)
    assert job.state == "failed"
    assert job.error is not None
    assert job.error.endswith("no retries left for infrastructure failures (infra_retries=1)")
    attempts = await harness.attempts(job_id)
    assert [(a.outcome, a.kind, a.signature) for a in attempts] == [
        ("failed", "infrastructure", "CUDA error"),
        ("failed", "infrastructure", "CUDA error"),
    ]
    assert attempts[0].worker_id != attempts[1].worker_id, "the retry went elsewhere"


async def test_a_poison_job_fails_after_the_same_error_on_two_workers(
    harness: FleetHarness,
) -> None:
    agents = {a.worker_id: a for a in [await harness.agent(n) for n in ("a", "b", "c")]}
    job_id = await harness.submit(max_retries=3)
    first = agents[str((await harness.job(job_id)).worker_id)]
    await fail(first, job_id, POISON)
    job = await harness.job(job_id)
    assert job.state == "dispatched" and job.worker_id != first.worker_id
    second = agents[str(job.worker_id)]
    # Another machine, other paths and numbers: the same bug.
    await fail(second, job_id, POISON.replace("/data/a.pt", "/scratch/b.pt").replace("3", "5"))
    job = await harness.job(job_id)
    assert job.state == "failed"
    assert job.error == (
        f"failed the same way on {first.worker_id} and {second.worker_id}: "
        "ValueError: expected N channels in <path>, got N"
    )
    attempts = await harness.attempts(job_id)
    assert [(a.outcome, a.kind) for a in attempts] == [
        ("failed", "job_error"),
        ("failed", "job_error"),
    ]
    kinds = [e.detail.get("kind") for e in await harness.timeline(job_id) if e.attempt]
    assert "job_error" in kinds


async def test_failures_that_say_only_an_exit_code_are_not_poison(
    harness: FleetHarness,
) -> None:
    """SimpleTuner's agent reports every failure as "Training exited with code 1": two
    of them on two workers are not known to be the same bug, so the job spends its
    retries as it would have before signatures (max_retries=2: three attempts)."""
    agents = {a.worker_id: a for a in [await harness.agent(n) for n in ("a", "b", "c")]}
    job_id = await harness.submit(max_retries=2)
    ran_on = []
    for _ in range(3):
        job = await harness.job(job_id)
        assert job.state == "dispatched", job.error
        ran_on.append(job.worker_id)
        await fail(agents[str(job.worker_id)], job_id, "Training exited with code 1")
    job = await harness.job(job_id)
    assert job.state == "failed"
    assert job.error == "Training exited with code 1; no retries left (max_retries=2)"
    assert len(set(ran_on)) == 3, "each retry went elsewhere"


async def test_a_retry_waits_for_another_worker_rather_than_go_back_and_says_why(
    harness: FleetHarness,
) -> None:
    bad = await harness.agent("bad")
    job_id = await harness.submit(max_retries=3)
    good = await harness.agent("good")
    blocker = await harness.submit(max_retries=3)  # keeps "good" busy
    assert (await harness.job(blocker)).worker_id == good.worker_id
    await fail(bad, job_id, CUDA)
    # "bad" is idle, but the job failed there and "good" fits: it waits for "good".
    job = await harness.job(job_id)
    assert job.state == "pending"
    reason = await harness.ctx.scheduler.ask(m.ExplainWait(job_id))
    assert reason.startswith(f"avoiding {bad.worker_id} (it failed there); ")
    assert good.worker_id in reason
    await good.run_to_completion(blocker)
    assert (await harness.job(job_id)).worker_id == good.worker_id


async def test_a_retry_never_waits_for_a_worker_that_is_draining(
    harness: FleetHarness,
) -> None:
    """The only other fitting worker is draining: it will take no new job, so the retry
    goes back to the idle worker it failed on rather than wait for ever (found by the
    scheduling property test: a job error, then the other worker drained)."""
    first = await harness.agent("first")
    job_id = await harness.submit(max_retries=3)
    other = await harness.agent("other")
    blocker = await harness.submit(max_retries=3)  # keeps "other" busy
    assert (await harness.job(blocker)).worker_id == other.worker_id
    await harness.fleet.drain(other.worker_id, actor="admin")
    await harness.settle()
    await fail(first, job_id, POISON)  # a job error: the retry avoids "first" if it can
    job = await harness.job(job_id)
    assert (job.state, job.worker_id) == ("dispatched", first.worker_id)


async def test_three_infrastructure_failures_quarantine_the_worker(
    harness: FleetHarness,
) -> None:
    bad = await harness.agent("bad")
    xid = {"log_tail": ["NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus. GPU 1"]}
    first = await harness.submit(max_retries=0)
    for _ in range(2):  # the only worker: it comes back, and fails past infra_retries=1
        assert (await harness.job(first)).worker_id == bad.worker_id
        await fail(bad, first, "exit code 1: lost it", xid)
    assert await harness.job_state(first) == "failed"
    assert not harness.worker(bad.worker_id).quarantined, "two is not three"
    await pass_minutes(bad, 40)
    waiting = await harness.submit(max_retries=0)
    await fail(bad, waiting, "exit code 1: lost it", xid)
    snapshot = await harness.fleet.get_worker(bad.worker_id)
    assert snapshot["quarantined"] is True
    assert snapshot["quarantine_reason"] == "3 infrastructure failures in 40 min (Xid 79 on GPU 1)"
    assert snapshot["status"] == "idle" and snapshot["connected"] is True
    [event] = await harness.store.list_audit(kind="worker.quarantined", target=bad.worker_id)
    assert event.actor == "orchestrator"
    assert (
        'worker_quarantines_total{how="automatic"} 1.0' in harness.ctx.metrics.render()[0].decode()
    )
    # It takes no new job: the job it failed waits, and its wait reason says why.
    assert await harness.job_state(waiting) == "pending"
    reason = await harness.ctx.scheduler.ask(m.ExplainWait(waiting))
    assert f"{bad.worker_id} quarantined: 3 infrastructure failures" in reason
    # Released by hand, it takes jobs again.
    await harness.fleet.release_quarantine(bad.worker_id, "admin")
    await harness.settle()
    assert (await harness.job(waiting)).worker_id == bad.worker_id
    with pytest.raises(Conflict, match="is not quarantined"):
        await harness.fleet.release_quarantine(bad.worker_id, "admin")


async def test_an_agent_shutting_down_spends_the_budget_but_never_quarantines(
    harness: FleetHarness,
) -> None:
    """A spot instance reclaimed, or an operator's SIGTERM: the agent stops its job and
    says cancelled. Three in an hour are not a broken machine (no quarantine), but each
    spends the job's infrastructure budget as a lost worker does (infra_retries=1)."""
    spot = await harness.agent("spot")
    for _ in range(3):
        job_id = await harness.submit(max_retries=0)
        assert (await harness.job(job_id)).worker_id == spot.worker_id
        await spot.report(job_id, "running")
        await spot.report(job_id, "cancelled", error="agent shutting down")
        await spot.report(job_id, "running")  # dispatched to it again: the only worker
        await spot.report(job_id, "cancelled", error="agent shutting down")
        job = await harness.job(job_id)
        assert job.state == "failed"
        assert job.error is not None and job.error.endswith(
            "no retries left for infrastructure failures (infra_retries=1)"
        )
        attempts = await harness.attempts(job_id)
        assert [(a.outcome, a.kind) for a in attempts] == [
            ("lost", "worker_shutdown"),
            ("failed", "worker_shutdown"),  # its last: the job failed with it
        ]
        await pass_minutes(spot, 5)
    assert not harness.worker(spot.worker_id).quarantined


async def test_a_quarantine_by_hand_keeps_the_current_job_and_survives_a_restart(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job()
    snapshot = await harness.fleet.quarantine(agent.worker_id, "ECC errors on GPU 0", "admin")
    assert (snapshot["status"], snapshot["quarantined"]) == ("busy", True)
    with pytest.raises(Conflict, match="already quarantined"):
        await harness.fleet.quarantine(agent.worker_id, "again", "admin")
    await agent.report(job_id, "completed")
    assert await harness.job_state(job_id) == "completed"
    restarted = await harness.restart(5.0)
    again = await restarted.fleet.get_worker(agent.worker_id)
    assert (again["quarantined"], again["quarantine_reason"]) == (True, "ECC errors on GPU 0")
    assert restarted.worker(agent.worker_id).quarantined


async def test_a_quarantined_ephemeral_worker_is_told_to_exit(harness: FleetHarness) -> None:
    agent = await harness.agent("eph", worker_type="ephemeral")
    await harness.fleet.quarantine(agent.worker_id, "bad disk", "admin")
    await harness.settle()
    [shutdown] = agent.received("shutdown")
    assert "quarantined: bad disk" in shutdown.data["reason"]
    # Back again (its agent restarted): told again.
    agent.close_stream()
    await agent.register()
    await agent.connect()
    await harness.settle()
    assert [e.data["reason"] for e in agent.received("shutdown")] == [shutdown.data["reason"]] * 2


async def test_job_errors_of_jobs_that_then_succeed_elsewhere_quarantine_the_worker(
    harness: FleetHarness,
) -> None:
    harness.ctx.settings = replace(harness.ctx.settings, quarantine=QuarantineRule(after=2))
    suspect = await harness.agent("suspect")
    fine = await harness.agent("fine")
    for n in range(2):
        await harness.fleet.drain(fine.worker_id, "admin")  # the first attempt: on suspect
        job_id = await harness.submit(max_retries=1)
        assert (await harness.job(job_id)).worker_id == suspect.worker_id
        await harness.fleet.resume(fine.worker_id, "admin")
        await harness.settle()
        await fail(suspect, job_id, f"exit code 1: KeyError: 'weights{n}x'")
        assert (await harness.job(job_id)).worker_id == fine.worker_id  # the retry: elsewhere
        snapshot = await harness.fleet.get_worker(suspect.worker_id)
        assert snapshot["quarantined"] is False, "not until the job succeeds elsewhere"
        await fine.run_to_completion(job_id)
    snapshot = await harness.fleet.get_worker(suspect.worker_id)
    assert snapshot["quarantine_reason"] == "2 failed jobs that then succeeded elsewhere in 0 s"
