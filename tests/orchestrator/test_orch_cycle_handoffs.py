"""What one job cycle costs in hand-offs between threads and tasks on the event loop,
counted (never timed), so a saving cannot silently come undone: submit (placed at once
on the idle worker), running, completed, the final answer written, on SQLite's real
database thread. Each write hands off to the database thread once and comes back in one
wake-up; the audit events' lines ride their job's commit (no hand-off to the audit file's
thread and back); no task is made but one per message to an idle actor and the shielded
placement."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from orchestrator_testkit import FleetHarness, Storage, job_record

from tunefleet.actors import messages as m
from tunefleet.actors.runtime import Actor
from tunefleet.actors.stream import StreamConnection, StreamEvent
from tunefleet.storage.database import Database

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def storage() -> Storage:
    return "sqlite"  # the real database thread, whose wake-ups are counted


class LoopCounts:
    """Wake-ups of the loop from other threads (by callback) and tasks made (by coroutine)."""

    def __init__(self) -> None:
        self.wakeups: Counter[str] = Counter()
        self.tasks: Counter[str] = Counter()


@contextmanager
def counting(loop: asyncio.AbstractEventLoop) -> Iterator[LoopCounts]:
    counts = LoopCounts()
    real_threadsafe = loop.call_soon_threadsafe

    def threadsafe(callback: Callable[..., object], *args: Any, **kwargs: Any) -> asyncio.Handle:
        counts.wakeups[getattr(callback, "__qualname__", repr(callback))] += 1
        return real_threadsafe(callback, *args, **kwargs)

    def task_factory(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
    ) -> asyncio.Task[Any]:
        counts.tasks[_task_name(coro)] += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.call_soon_threadsafe = threadsafe  # type: ignore[method-assign]
    loop.set_task_factory(task_factory)  # type: ignore[arg-type]
    try:
        yield counts
    finally:
        loop.set_task_factory(None)
        del loop.call_soon_threadsafe


def _task_name(coro: Coroutine[Any, Any, Any]) -> str:
    """An actor's task by the actor and the message it was made for."""
    actor = coro.cr_frame.f_locals.get("self") if coro.__qualname__ == "Actor._run" else None
    if not isinstance(actor, Actor):
        return coro.__qualname__
    mailbox = actor._mailbox
    first = type(mailbox[0][0]).__name__ if mailbox else "on_start"
    return f"{type(actor).__name__} {first}"


async def _one_cycle(harness: FleetHarness, worker_id: str) -> str:
    fleet = harness.fleet
    reply = await fleet.submit(job_record(), actor="tester")
    job_id = str(reply["job_id"])
    await harness.settle()
    for word in ("running", "completed"):
        await fleet.report_status(worker_id, job_id, m.StatusReported(worker_id, word, None, None))
        await harness.settle()
    fleet.report_written(worker_id, job_id)
    await harness.settle()
    return job_id


async def test_a_job_cycle_hands_off_once_per_write_and_its_audit_lines_ride_the_commits(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    await _one_cycle(harness, agent.worker_id)  # warm: first-use work stays out of the count
    db = harness.db
    assert isinstance(db, Database)
    writes_before = db.stats.writes
    with counting(asyncio.get_running_loop()) as counts:
        job_id = await _one_cycle(harness, agent.worker_id)
    writes = db.stats.writes - writes_before
    # Placed at submit (one write), acknowledged, ended: three writes, three wake-ups.
    assert writes == 3
    assert dict(counts.wakeups) == {"_settle_futures": 3}
    lines = [json.loads(line) for line in harness.audit.path.read_text("utf-8").splitlines()]
    stored = await harness.store.list_audit(target=job_id, newest_first=False)
    assert [e.kind for e in stored] == ["job.submitted", "job.dispatched", "job.completed"]
    assert [(line["id"], line["hash"]) for line in lines if line["target"] == job_id] == [
        (e.id, e.hash) for e in stored
    ]


async def test_a_job_cycle_makes_a_task_per_message_to_an_idle_actor_and_no_other(
    harness: FleetHarness,
) -> None:
    agent = await harness.agent("w1")
    await _one_cycle(harness, agent.worker_id)
    with counting(asyncio.get_running_loop()) as counts:
        await _one_cycle(harness, agent.worker_id)
    # One task per message that finds its actor idle and needs an await, and the
    # shielded placement (a caller gone mid-commit must not strand the reserved worker):
    # no task gathers or waits for an audit line. The placement, the reservation and the
    # push are answered at once by the idle scheduler and worker, in the submission's own
    # task; the acknowledgement, the release, the report written and the worker free
    # again (no job waiting) are handled at once in the teller's.
    assert dict(counts.tasks) == {
        "Fleet._submit_placed": 1,
        "JobActor StatusReported": 2,  # running, completed
    }


async def test_a_dispatchs_audit_line_is_on_file_before_its_job_submit_is_pushed(
    harness: FleetHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order the lines' writer gives: a job's lines are written right after its
    commit, before anything follows from it (its job_submit on the worker's stream), both
    when it is placed at submit and when it is dispatched from the queue."""
    agent = await harness.agent("w1")
    on_file_at_push: list[list[str]] = []
    real_send = StreamConnection.send

    def send(conn: StreamConnection, event: StreamEvent) -> None:
        if event.type == "job_submit":
            text = harness.audit.path.read_text("utf-8")
            on_file_at_push.append([json.loads(line)["kind"] for line in text.splitlines()])
        real_send(conn, event)

    monkeypatch.setattr(StreamConnection, "send", send)
    placed = await harness.submit()
    await harness.submit()  # waits for the worker
    await agent.run_to_completion(placed)  # the worker is free: the queued job goes out
    assert [kinds[-2:] for kinds in on_file_at_push] == [
        ["job.submitted", "job.dispatched"],  # placed at submit: one commit, both lines
        ["job.completed", "job.dispatched"],  # from the queue, right after the release
    ]
