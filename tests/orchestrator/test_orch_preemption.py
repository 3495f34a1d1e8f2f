"""Preemption (issue 25): a dispatched or running job's attempt is stopped with a grace,
ends ``preempted`` without spending a retry, and the job goes back to the head of its
priority band; a worker that never reports does not hold the job up, but takes no new
work until it reports or is lost. Every refusal is a clear domain error."""

from __future__ import annotations

import pytest
from orchestrator_testkit import FakeAgent, FleetHarness

from tunefleet.actors.preemption import NotPreemptible
from tunefleet.errors import Conflict, NotFound

pytestmark = pytest.mark.timeout(30)

EPS = 0.001


async def _beating(harness: FleetHarness, agent: FakeAgent, job_id: str, seconds: float) -> None:
    """Advance ``seconds`` while the agent heartbeats (holding ``job_id``), so it is not lost."""
    step = harness.settings.heartbeat_timeout_s / 2
    while seconds > 0:
        await agent.heartbeat(job_id)
        await harness.advance(min(step, seconds))
        seconds -= step


async def _preempt(harness: FleetHarness, job_id: str, reason: str = "reclaim") -> dict:
    reply = await harness.fleet.preempt(job_id, reason, actor="alice")
    await harness.settle()
    return reply


def _preempted_count(harness: FleetHarness, team: str = "") -> float:
    value = harness.ctx.metrics.preemptions.labels(team=team)._value.get()
    return float(value)


async def test_a_preempted_job_is_requeued_without_spending_a_retry(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job(max_retries=0)
    reply = await _preempt(harness, job_id, "team b reclaims its quota")
    assert reply["status"] == "preempting" and reply["attempt"] == 1
    assert reply["grace_seconds"] == harness.settings.preempt_grace_s
    [cancel] = agent.received("job_cancel")
    assert cancel.data["job_id"] == job_id
    assert cancel.data["preempt"] is True
    assert cancel.data["grace_seconds"] == harness.settings.preempt_grace_s
    assert cancel.data["reason"] == "team b reclaims its quota"
    # The job keeps its worker while the trainer writes its checkpoint.
    assert await harness.job_state(job_id) == "running"

    await agent.report(job_id, "cancelled", error="stopped")
    # Back in the queue and, with the worker free again, dispatched at once: attempt 2,
    # although max_retries is 0.
    job = await harness.job(job_id)
    assert (job.state, job.attempts) == ("dispatched", 2)
    first, second = await harness.attempts(job_id)
    assert (first.outcome, first.reason) == ("preempted", "team b reclaims its quota")
    assert second.outcome is None
    assert [e.data["attempt"] for e in agent.received("job_submit")] == [1, 2]
    kinds = await harness.timeline_kinds(job_id)
    assert kinds[-3:] == ["stop_requested", "preempted", "dispatched"]
    actor = harness.job_actor(job_id)
    assert actor is not None and actor.preempted == 1
    assert _preempted_count(harness) == 1

    await agent.run_to_completion(job_id)
    assert await harness.job_state(job_id) == "completed"


async def test_each_preemption_is_audited_with_who_why_and_the_attempt(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job()
    await _preempt(harness, job_id, "manual: make room")
    [entry] = await harness.store.list_audit(kind="job.preempted", target=job_id)
    assert entry.actor == "alice"
    assert entry.detail["reason"] == "manual: make room"
    assert entry.detail["attempt"] == 1
    assert entry.detail["worker_id"] == agent.worker_id
    await agent.report(job_id, "cancelled")
    requeued = await harness.store.list_audit(kind="job.requeued", target=job_id)
    assert [(e.detail["attempt_outcome"], e.detail["attempt"]) for e in requeued] == [
        ("preempted", 1)
    ]


async def test_a_preempted_job_goes_to_the_head_of_its_priority_band(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job()
    earlier = await harness.submit()  # same priority, submitted after it but before...
    urgent = await harness.submit(priority=5)  # ...and a higher priority one
    await _preempt(harness, job_id)
    await agent.report(job_id, "cancelled")
    # The higher priority still comes first.
    assert agent.submitted_jobs()[-1] == urgent
    place = await harness.fleet.position(job_id)
    assert place["position"] == 1, "ahead of the job of its priority that waited longer"
    assert (await harness.fleet.position(earlier))["position"] == 2
    await agent.run_to_completion(urgent)
    assert agent.submitted_jobs()[-1] == job_id
    # Dispatched again: it is an ordinary job from now on.
    actor = harness.job_actor(job_id)
    assert actor is not None and actor.pending_view().seq == actor.rec.seq


async def test_a_trainer_that_completes_within_the_grace_completes_the_job(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job()
    await _preempt(harness, job_id)
    await agent.report(job_id, "completed", {"step": 10, "total": 10})
    job = await harness.job(job_id)
    assert (job.state, job.attempts) == ("completed", 1)
    assert _preempted_count(harness) == 0


async def test_a_worker_that_never_reports_gets_the_job_requeued_and_no_new_work(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job()
    other = await harness.submit()
    await _preempt(harness, job_id)
    bound = harness.settings.preempt_grace_s + harness.settings.preempt_slack_s

    await _beating(harness, agent, job_id, bound - EPS)
    assert await harness.job_state(job_id) == "running"
    await _beating(harness, agent, job_id, EPS)

    job = await harness.job(job_id)
    assert (job.state, job.attempts) == ("pending", 1)
    [first] = await harness.attempts(job_id)
    assert first.outcome == "preempted"
    assert first.reason is not None and f"did not report the stop within {bound:g} s" in (
        first.reason
    )
    # The worker may still be stopping the trainer: nothing new goes to it.
    assert not harness.worker(agent.worker_id).schedulable
    assert agent.submitted_jobs() == [job_id]
    await _beating(harness, agent, job_id, 300)
    assert agent.submitted_jobs() == [job_id]

    # Its late report on the stopped attempt frees it; the preempted job goes first.
    reply = await agent.report(job_id, "cancelled")
    assert reply == {"success": True, "release_hold": True}
    assert agent.submitted_jobs() == [job_id, job_id]
    assert (await harness.job(job_id)).attempts == 2
    await agent.run_to_completion(job_id)
    assert agent.submitted_jobs()[-1] == other


async def test_a_held_worker_lost_is_forgotten_and_its_job_still_runs_elsewhere(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job()
    await _preempt(harness, job_id)
    bound = harness.settings.preempt_grace_s + harness.settings.preempt_slack_s
    await _beating(harness, agent, job_id, bound)
    assert await harness.job_state(job_id) == "pending"
    spare = await harness.agent("spare")
    assert spare.submitted_jobs() == [job_id]
    # The held worker comes back without the job: it is free again.
    reply = await agent.register(current_job_id=job_id)
    assert reply["abandon_job"] == job_id
    await agent.connect()
    await harness.settle()
    assert harness.worker(agent.worker_id).schedulable


async def test_a_late_report_on_a_job_that_ended_since_frees_the_worker(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job()
    await _preempt(harness, job_id)
    bound = harness.settings.preempt_grace_s + harness.settings.preempt_slack_s
    await _beating(harness, agent, job_id, bound)
    spare = await harness.agent("spare")
    await spare.run_to_completion(job_id)
    assert await harness.job_state(job_id) == "completed"
    with pytest.raises(Conflict):
        await agent.report(job_id, "cancelled")
    await harness.settle()
    assert harness.worker(agent.worker_id).schedulable


async def test_losing_the_worker_while_it_stops_requeues_as_preempted(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job(max_retries=0)
    await _preempt(harness, job_id)
    await agent.disconnect()
    job = await harness.job(job_id)
    assert (job.state, job.attempts) == ("pending", 1)
    [first] = await harness.attempts(job_id)
    assert first.outcome == "preempted"
    assert first.reason is not None and "disconnected" in first.reason


async def test_a_cancel_during_the_preemption_wins(harness: FleetHarness) -> None:
    agent, job_id = await harness.running_job()
    await _preempt(harness, job_id)
    await harness.fleet.cancel(job_id, actor="bob")
    await harness.settle()
    await agent.report(job_id, "cancelled")
    assert await harness.job_state(job_id) == "cancelled"


async def test_a_dispatched_job_not_yet_acknowledged_can_be_preempted(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit(max_retries=0)
    await _preempt(harness, job_id)
    await agent.report(job_id, "starting")  # it got the job_submit after all
    assert await harness.job_state(job_id) == "running"
    await agent.report(job_id, "cancelled")
    job = await harness.job(job_id)
    assert (job.state, job.attempts) == ("dispatched", 2)


async def test_a_preempted_dispatch_acknowledged_later_is_still_bounded(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit()
    await _preempt(harness, job_id)
    await _beating(harness, agent, job_id, 10)
    await agent.report(job_id, "starting")  # acknowledged: told again, with the bound
    assert len(agent.received("job_cancel")) == 2
    bound = harness.settings.preempt_grace_s + harness.settings.preempt_slack_s
    await _beating(harness, agent, job_id, bound - EPS)
    assert await harness.job_state(job_id) == "running"
    await _beating(harness, agent, job_id, EPS)
    assert await harness.job_state(job_id) == "pending"


async def test_a_held_worker_whose_agent_no_longer_holds_the_job_is_free(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job()
    await _preempt(harness, job_id)
    bound = harness.settings.preempt_grace_s + harness.settings.preempt_slack_s
    await _beating(harness, agent, job_id, bound)
    assert not harness.worker(agent.worker_id).schedulable
    # Its agent dropped the job without a word (its report lost for good).
    await agent.heartbeat(None)
    await harness.settle()
    assert agent.submitted_jobs() == [job_id, job_id]  # free again: the job came back


async def test_preempting_a_job_that_holds_no_worker_is_refused_with_advice(
    harness: FleetHarness,
) -> None:
    job_id = await harness.submit()  # no worker: it waits
    with pytest.raises(NotPreemptible, match=r"is pending, not dispatched or running.*cancel"):
        await harness.fleet.preempt(job_id, "x")
    assert NotPreemptible.status == 409
    with pytest.raises(NotFound, match="Job not found: j_nope"):
        await harness.fleet.preempt("j_nope", "x")
    await harness.fleet.cancel(job_id, actor="bob")
    await harness.settle()
    with pytest.raises(NotPreemptible, match=r"is cancelled.*it has ended"):
        await harness.fleet.preempt(job_id, "x")


async def test_preempting_twice_or_while_cancelling_is_refused(harness: FleetHarness) -> None:
    agent, job_id = await harness.running_job()
    await _preempt(harness, job_id, "first")
    with pytest.raises(NotPreemptible, match=r"already being preempted \(first\)"):
        await harness.fleet.preempt(job_id, "second")
    assert len(agent.received("job_cancel")) == 1
    await agent.report(job_id, "cancelled")
    await agent.report(job_id, "running")  # attempt 2 on the same worker
    await harness.fleet.cancel(job_id, actor="bob")
    with pytest.raises(NotPreemptible, match="already being stopped"):
        await harness.fleet.preempt(job_id, "third")


async def _preempt_and_requeue(harness: FleetHarness, agent: FakeAgent, job_id: str) -> None:
    await _preempt(harness, job_id)
    await agent.report(job_id, "cancelled")


@pytest.mark.parametrize("storage", ["sqlite"])
async def test_a_restart_keeps_the_preemption_and_the_retries(harness: FleetHarness) -> None:
    agent, job_id = await harness.running_job(max_retries=0)
    await _preempt(harness, job_id)
    # Down while the trainer stops: the new orchestrator asks again, and still knows
    # it is a preemption.
    new = await harness.restart(5.0, agent)
    await agent.register(current_job_id=job_id)
    await agent.connect()
    await new.settle()
    cancel = agent.received("job_cancel")[-1]
    assert cancel.data["preempt"] is True
    await agent.report(job_id, "cancelled")
    job = await new.job(job_id)
    assert (job.state, job.attempts) == ("dispatched", 2)
    actor = new.job_actor(job_id)
    assert actor is not None and actor.preempted == 1


@pytest.mark.parametrize("storage", ["sqlite"])
async def test_a_restart_keeps_a_preempted_job_at_the_head_of_its_band(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job(max_retries=0)
    waiting = await harness.submit()
    await _preempt(harness, job_id)
    await agent.disconnect()  # requeued as preempted; nobody to run it
    new = await harness.restart(5.0)
    assert (await new.fleet.position(job_id))["position"] == 1
    assert (await new.fleet.position(waiting))["position"] == 2
    actor = new.job_actor(job_id)
    assert actor is not None and actor.preempted == 1 and actor.retries_left()
