"""Reports fenced by attempt: every status report names the dispatch it is about, and a
refusal (409) of a report on an earlier attempt abandons only that attempt, never a newer
attempt of the same job that the orchestrator has dispatched here since."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agent_loop_testkit import FakeExecutor, ProtocolServer, eventually, make_agent, running
from aiohttp import web

from tunefleet.agent.outbox import Outbox

pytestmark = pytest.mark.timeout(30)


class FencingServer(ProtocolServer):
    """Refuses (409) reports on the attempts in ``stale``, as tunefleet's orchestrator does
    once a job moved on; a final report on attempt ``held_attempt`` waits for ``gate``."""

    def __init__(self) -> None:
        super().__init__()
        self.stale: set[int] = set()
        self.held_attempt: int | None = None
        self.gate = asyncio.Event()

    def attempts_of(self, job_id: str) -> list[tuple[int | None, str]]:
        return [(body.get("attempt"), body["status"]) for body in self.statuses(job_id)]

    async def _status(self, request: web.Request) -> web.Response:
        body = await request.json()
        attempt = body.get("attempt")
        if attempt == self.held_attempt and body["status"] in ("completed", "cancelled"):
            await self.gate.wait()
        if attempt in self.stale:
            job_id = request.match_info["job_id"]
            detail = f"report for attempt {attempt} of job {job_id}; abandon attempt {attempt}"
            return web.json_response({"detail": detail}, status=409)
        return web.json_response({"success": True})


@pytest.fixture
async def fencing(aiohttp_server: Any) -> tuple[FencingServer, str]:
    server = FencingServer()
    test_server = await aiohttp_server(server.app())
    return server, str(test_server.make_url("")).rstrip("/")


async def test_a_refused_earlier_attempt_leaves_the_newer_attempt_running(
    fencing: tuple[FencingServer, str],
) -> None:
    server, url = fencing
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor)
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit", job_id="j_1", attempt=1, config={})
        await eventually(lambda: (1, "running") in server.attempts_of("j_1"), "attempt 1 runs")
        # The orchestrator gave up on attempt 1 (say, its acknowledgement came too late):
        # it cancels it and dispatches the job here again as attempt 2, while the agent's
        # final report on attempt 1 is still on its way.
        server.held_attempt = 1
        server.stale.add(1)
        server.push("job_cancel", job_id="j_1")
        await eventually(lambda: (1, "cancelled") in server.attempts_of("j_1"), "the final")
        server.push("job_submit", job_id="j_1", attempt=2, config={})
        await eventually(lambda: len(executor.runs) == 2, "attempt 2 to start")
        server.gate.set()  # now the attempt-1 report is refused: 409
        await eventually(lambda: (2, "running") in server.attempts_of("j_1"), "attempt 2 runs")
        current = executor.current
        assert current is not None and current.spec.attempt == 2
        assert len(executor.cancels) == 1  # only the orchestrator's cancel of attempt 1
        assert (agent.state, agent.current_job_id) == ("busy", "j_1")
        await current.progress(step=7)
        current.complete()
        await eventually(lambda: (2, "completed") in server.attempts_of("j_1"), "completion")
        await eventually(lambda: agent.state == "idle", "the worker to be idle")
    assert [s for a, s in server.attempts_of("j_1") if a == 2][:2] == ["starting", "running"]
    assert {a for a, _ in server.attempts_of("j_1")} == {1, 2}  # every report names one


async def test_a_refusal_of_the_running_attempt_still_abandons_it(
    fencing: tuple[FencingServer, str],
) -> None:
    server, url = fencing
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor)
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit", job_id="j_1", attempt=3, config={})
        await eventually(lambda: executor.current is not None, "the job to start")
        job = executor.current
        assert job is not None
        server.stale.add(3)
        await job.progress(step=1)
        await eventually(lambda: executor.cancels, "the job to be stopped")
        await eventually(lambda: agent.state == "idle", "the worker to be idle")
    assert executor.cancels[0].startswith("abandoned")
    assert agent.current_job_id is None


def test_outbox_reports_remember_their_attempt_and_drop_only_theirs() -> None:
    outbox = Outbox()
    outbox.add_status("j", "cancelled", attempt=1, error="stopped")
    outbox.add_logs("j", 1, [])
    outbox.add_status("j", "starting", attempt=2)
    # Attempt 1's final report does not silence attempt 2's progress.
    outbox.add_progress("j", {"step": 1}, attempt=2)
    outbox.add_progress("j", {"step": 2}, attempt=2)  # replaces the unsent one
    assert [(r.attempt, r.body["status"], r.body.get("attempt")) for r in outbox.pending()] == [
        (1, "cancelled", 1),
        (2, "starting", 2),
        (2, "running", 2),
    ]
    assert outbox.pending()[-1].body["progress"] == {"step": 2}
    assert outbox.drop_job("j", 1) == 1
    assert [r.attempt for r in outbox.pending()] == [2, 2]
    assert outbox.drop_job("j") == 2  # no attempt given: all of the job's reports


def test_outbox_without_attempt_sends_the_body_simpletuner_knows() -> None:
    outbox = Outbox()
    outbox.add_status("j", "running")
    report = outbox.pending()[0]
    assert report.body == {"status": "running", "progress": None, "error": None}
    assert report.attempt is None
