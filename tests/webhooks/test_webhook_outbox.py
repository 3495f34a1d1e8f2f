"""Which webhook events a job step makes, told by its audit kind and read in its own
transaction (issue 27): a preempted attempt's generic requeue is job.preempted (issue
25's outcome, so it appears once that lands), a lost one job.retried; a held submit also
needs approval; a rejection is also approval.rejected."""

from __future__ import annotations

from tunefleet.storage.memory import memory_store
from tunefleet.storage.store import Repos
from tunefleet.webhooks.outbox import REJECTED_PREFIX, job_events_of


async def _events(kind: str, **job: object) -> list[str]:
    store = memory_store()

    def step(repos: Repos) -> list[str]:
        repos.jobs.create("j_1", config={}, **job)
        return job_events_of(kind, repos, "j_1")

    return await store.atomically(step)


async def _requeued(outcome: str) -> list[str]:
    store = memory_store()

    def step(repos: Repos) -> list[str]:
        repos.jobs.create("j_1", config={})
        repos.jobs.start_attempt("j_1", 1, worker_id=None, dispatched_at=1.0)
        repos.jobs.end_attempt("j_1", 1, outcome=outcome, ended_at=2.0)
        return job_events_of("job.requeued", repos, "j_1")

    return await store.atomically(step)


async def test_a_requeue_is_a_retry_or_a_preemption_by_the_attempts_outcome() -> None:
    assert await _requeued("lost") == ["job.retried"]
    assert await _requeued("undelivered") == ["job.retried"]
    assert await _requeued("preempted") == ["job.preempted"]


async def test_submits_approvals_and_ends() -> None:
    assert await _events("job.submitted") == ["job.submitted"]
    held = await _events("job.submitted", state="pending_approval")
    assert held == ["job.submitted", "approval.required"]
    assert await _events("job.approved") == ["approval.granted"]
    rejected = await _events("job.cancelled", error=f"{REJECTED_PREFIX}bob: too big")
    assert rejected == ["approval.rejected", "job.cancelled"]
    assert await _events("job.cancelled", error="cancelled by admin") == ["job.cancelled"]
    assert await _events("job.completed") == ["job.completed"]
    assert await _events("job.dispatched") == []  # not an event anyone subscribes to
