"""A job's steps and their audit events commit together: a submit, a dispatch, a requeue
and an end each store the job's rows and its audit event in one transaction, then the
event's JSON line names the stored record. A step that fails stores neither."""

from __future__ import annotations

import json
from typing import Any

import pytest
from orchestrator_testkit import FleetHarness, job_record

from tunefleet.audit import AuditKind
from tunefleet.errors import Conflict


def _lines(harness: FleetHarness) -> list[dict[str, object]]:
    text = harness.audit.path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


async def test_every_step_of_a_job_commits_once_with_its_audit_event(
    harness: FleetHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = await harness.agent("w1")
    separate: list[str] = []  # events stored by a write of their own
    store_alone = harness.audit._store_append

    async def spy(kind: str, **fields: Any) -> Any:
        separate.append(kind)
        return await store_alone(kind, **fields)

    monkeypatch.setattr(harness.audit, "_store_append", spy)
    job_id = await harness.submit()
    await agent.run_to_completion(job_id)
    assert [kind for kind in separate if kind.startswith("job.")] == []

    job_events = [
        e for e in await harness.store.list_audit(newest_first=False) if e.target == job_id
    ]
    assert [e.kind for e in job_events] == ["job.submitted", "job.dispatched", "job.completed"]
    lines = {line["id"]: line for line in _lines(harness) if line["target"] == job_id}
    assert sorted(lines) == [e.id for e in job_events]
    assert all(lines[e.id]["hash"] == e.hash for e in job_events)
    assert await harness.store.verify_audit() == (True, None)


async def test_a_requeue_is_stored_with_its_audit_event(harness: FleetHarness) -> None:
    agent = await harness.agent("w1")
    job_id = await harness.submit()
    await agent.disconnect()
    kinds = [e.kind for e in await harness.store.list_audit(target=job_id, newest_first=False)]
    assert kinds == ["job.submitted", "job.dispatched", "job.requeued"]
    assert (await harness.timeline_kinds(job_id))[-1] == "requeued"


async def test_a_preemption_is_audited_and_its_end_stored_with_its_event(
    harness: FleetHarness,
) -> None:
    agent, job_id = await harness.running_job()
    await harness.fleet.preempt(job_id, "make room")  # the scheduler's call: its actor
    await harness.settle()
    await agent.report(job_id, "cancelled")
    events = await harness.store.list_audit(target=job_id, newest_first=False)
    assert [e.kind for e in events][2:5] == ["job.preempted", "job.requeued", "job.dispatched"]
    assert events[2].actor == "scheduler"
    lines = {line["id"]: line for line in _lines(harness) if line["target"] == job_id}
    assert all(lines[e.id]["hash"] == e.hash for e in events)
    assert await harness.store.verify_audit() == (True, None)


async def test_a_failed_step_stores_neither_the_change_nor_its_audit_event(
    harness: FleetHarness,
) -> None:
    job_id = await harness.submit()  # no worker: it stays pending
    rec = job_record()
    rec.job_id = job_id
    event = harness.audit.entry(AuditKind.JOB_DISPATCHED, actor="scheduler", target=job_id)
    await harness.store.atomically(
        lambda repos: repos.jobs.cas_state(job_id, "pending", "cancelled")
    )
    with pytest.raises(Conflict, match="no longer pending"):
        await harness.ctx.persistence.commit_dispatch(rec, "w_x", 1, 1.0, event)
    kinds = [e.kind for e in await harness.store.list_audit(target=job_id)]
    assert kinds == ["job.submitted"]
    assert await harness.store.verify_audit() == (True, None)
