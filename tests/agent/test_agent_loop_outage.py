"""The agent when the orchestrator goes away, comes back, changes its mind about a job,
refuses reports, or is slow: buffering, in-order delivery, resume/abandon, heartbeats
that nothing blocks, reconnect backoff, giving up."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from agent_loop_testkit import (
    FakeExecutor,
    FakeJob,
    ProtocolServer,
    RecordingSleep,
    eventually,
    make_agent,
    running,
)

from tunefleet.agent.client import OrchestratorUnreachable, TlsVerificationFailed
from tunefleet.agent.executor import JobOutcome
from tunefleet.http.tls import ensure_self_signed, server_ssl_context

pytestmark = pytest.mark.timeout(30)


class Orchestrator:
    """A ProtocolServer that can be stopped and started again on the same port."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory
        self.proto = ProtocolServer()
        self.server: Any = None
        self.port: int | None = None

    async def start(self, **kwargs: Any) -> None:
        self.server = await self.factory(self.proto.app(), port=self.port, **kwargs)
        self.port = self.server.port

    async def stop(self) -> None:
        await self.server.close()

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")


@pytest.fixture
async def orch(aiohttp_server: Any) -> Orchestrator:
    orchestrator = Orchestrator(aiohttp_server)
    await orchestrator.start()
    return orchestrator


async def start_job(server: ProtocolServer, executor: FakeExecutor, job_id: str = "j_1") -> FakeJob:
    await eventually(lambda: server.stream_opens, "the stream to open")
    server.push("job_submit", job_id=job_id, config={})
    await eventually(lambda: executor.current is not None, "the job to start")
    await eventually(lambda: "running" in server.status_words(job_id), "the running report")
    job = executor.current
    assert job is not None
    return job


def posts_for(server: ProtocolServer, job_id: str, since: int) -> list[tuple[str, Any]]:
    """(kind, detail) of each report for the job after request number ``since``."""
    out: list[tuple[str, Any]] = []
    for record in server.requests[since:]:
        if record.path == f"/api/workers/job/{job_id}/logs":
            out.append(("logs", [line["line"] for line in record.body["lines"]]))
        elif record.path == f"/api/workers/job/{job_id}/status":
            out.append(("status", record.body["status"]))
    return out


async def test_reports_are_buffered_while_down_and_delivered_in_order(orch: Orchestrator) -> None:
    server = orch.proto
    executor = FakeExecutor()
    agent = make_agent(orch.url, executor=executor)
    async with running(agent):
        job = await start_job(server, executor)
        await orch.stop()
        await eventually(lambda: not agent.online.is_set(), "the agent to notice the outage")
        await job.log("during outage 1")
        await job.progress(step=5)
        await job.log("during outage 2", "during outage 3")
        job.complete()
        await eventually(lambda: agent.state == "offline" and agent.jobs.running is None, "job end")
        assert agent.current_job_id == "j_1"  # held until its final report is delivered
        since = len(server.requests)
        await orch.start()
        await eventually(lambda: agent.current_job_id is None, "the final report to arrive")
    assert server.registrations[-1]["current_job_id"] == "j_1"
    assert posts_for(server, "j_1", since) == [
        ("logs", ["during outage 1"]),
        ("status", "running"),
        ("logs", ["during outage 2", "during outage 3"]),
        ("status", "completed"),
    ]
    assert [line["seq"] for line in server.log_lines("j_1")] == [1, 2, 3]
    assert server.statuses("j_1")[-1]["progress"] == {"step": 5}


async def test_resume_on_reregistration_keeps_the_job_running(orch: Orchestrator) -> None:
    server = orch.proto
    executor = FakeExecutor()
    agent = make_agent(orch.url, executor=executor)
    server.register_answers = [
        {},
        {"resume_job": {"job_id": "j_1", "config_name": "c", "status": "running"}},
    ]
    async with running(agent):
        job = await start_job(server, executor)
        server.drop_streams()
        await eventually(lambda: agent.registrations == 2, "a re-registration")
        assert server.registrations[1]["current_job_id"] == "j_1"
        assert agent.state == "busy"
        job.complete()
        await eventually(lambda: "completed" in server.status_words("j_1"), "the completion")
    assert executor.cancels == []


async def test_abandon_on_reregistration_stops_the_job_silently(orch: Orchestrator) -> None:
    server = orch.proto
    executor = FakeExecutor()
    agent = make_agent(orch.url, executor=executor)
    server.register_answers = [{}, {"abandon_job": "j_1"}]
    async with running(agent):
        await start_job(server, executor)
        server.drop_streams()
        await eventually(lambda: executor.cancels, "the job to be stopped")
        await eventually(lambda: agent.state == "idle", "the worker to be idle")
        assert agent.current_job_id is None
        before = list(server.status_words("j_1"))
        server.push("ping")
        await eventually(lambda: len(server.heartbeats) >= 3, "more heartbeats")
    assert executor.cancels[0].startswith("abandoned")
    assert server.status_words("j_1") == before == ["starting", "running"]  # no "cancelled"


async def test_conflict_on_a_report_abandons_the_job(orch: Orchestrator) -> None:
    server = orch.proto
    executor = FakeExecutor()
    agent = make_agent(orch.url, executor=executor)
    async with running(agent):
        job = await start_job(server, executor)
        server.status_errors["j_1"] = (409, "job j_1 was reassigned; abandon it")
        await job.progress(step=1)
        await eventually(lambda: executor.cancels, "the job to be stopped")
        await eventually(lambda: agent.state == "idle", "the worker to be idle")
        await job.log("too late")  # the executor may still say something: dropped
    assert len(server.statuses("j_1")) == 3  # starting, running, the refused progress
    assert server.log_lines("j_1") == []


async def test_no_logs_endpoint_turns_log_forwarding_off(orch: Orchestrator) -> None:
    server = orch.proto
    server.logs_endpoint = False  # SimpleTuner's orchestrator has none
    executor = FakeExecutor()
    agent = make_agent(orch.url, executor=executor)
    async with running(agent):
        job = await start_job(server, executor)
        await job.log("first")
        await eventually(lambda: not agent.outbox.logs_enabled, "forwarding to be off")
        await job.log("second")
        job.complete()
        await eventually(lambda: "completed" in server.status_words("j_1"), "the completion")
    assert len(server.of("/logs")) == 1


async def test_heartbeats_go_on_while_a_report_hangs_and_output_floods(orch: Orchestrator) -> None:
    server = orch.proto

    async def hang_logs(_request: Any) -> Any:
        await asyncio.sleep(60)

    server._logs = hang_logs  # type: ignore[method-assign,assignment]
    await orch.stop()
    await orch.start()  # the app is built again with the hanging handler

    async def flood(job: FakeJob) -> None:
        while True:
            await job.log(*(f"line {n}" for n in range(50)))
            await asyncio.sleep(0)

    executor = FakeExecutor(flood)
    agent = make_agent(orch.url, executor=executor, stop_timeout_s=0.2)
    async with running(agent):
        await start_job(server, executor)
        await eventually(lambda: server.of("/logs"), "a log batch to hang")
        seen = len(server.heartbeats)
        await eventually(lambda: len(server.heartbeats) >= seen + 5, "five heartbeats meanwhile")
        assert server.heartbeats[-1]["status"] == "busy"
        assert server.heartbeats[-1]["current_job_id"] == "j_1"
        assert agent.outbox.pending()  # the flood is buffered, bounded, behind the hung request


async def test_heartbeats_go_on_while_the_trainer_is_silent(orch: Orchestrator) -> None:
    server = orch.proto
    executor = FakeExecutor()
    agent = make_agent(orch.url, executor=executor)
    async with running(agent):
        await start_job(server, executor)
        seen = len(server.heartbeats)
        await eventually(lambda: len(server.heartbeats) >= seen + 5, "five busy heartbeats")
    assert all(b["current_job_id"] == "j_1" for b in server.heartbeats[seen : seen + 5])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_persistent_agent_retries_with_growing_backoff(aiohttp_server: Any) -> None:
    port = free_port()
    sleep = RecordingSleep(cap_s=0.01)
    agent = make_agent(f"http://127.0.0.1:{port}", sleep=sleep, backoff_max_s=0.08)
    orchestrator = Orchestrator(aiohttp_server)
    orchestrator.port = port
    async with running(agent) as task:
        await eventually(lambda: len(sleep.delays) >= 6, "six refused attempts")
        assert not task.done()
        await orchestrator.start()
        await eventually(lambda: orchestrator.proto.stream_opens, "the agent to connect")
    delays = sleep.delays[:6]
    assert delays[0] <= 0.01 and max(delays) <= 0.08
    assert delays[4] > delays[0]  # it backs off


async def test_with_a_job_in_hand_reconnects_no_slower_than_heartbeats(orch: Orchestrator) -> None:
    # Backing off to a minute would let a restarted orchestrator's heartbeat deadline
    # pass and hand the job to another worker while it still runs here.
    sleep = RecordingSleep(cap_s=0.01)
    executor = FakeExecutor()
    agent = make_agent(
        orch.url, executor=executor, sleep=sleep, heartbeat_interval_s=0.05, backoff_max_s=5.0
    )
    async with running(agent):
        await start_job(orch.proto, executor)
        sleep.delays.clear()
        await orch.stop()
        await eventually(lambda: len(sleep.delays) >= 12, "a dozen reconnect attempts")
        assert max(sleep.delays) <= 0.05, sleep.delays


async def test_ephemeral_agent_gives_up_with_the_connection_refused_message() -> None:
    agent = make_agent(f"http://127.0.0.1:{free_port()}", persistent=False, reconnect_timeout_s=0)
    with pytest.raises(OrchestratorUnreachable) as raised:
        await agent.run()
    message = str(raised.value)
    assert message.startswith("Connection refused")
    assert "port" in message and "firewall" in message and "--host 0.0.0.0" in message


async def test_unverifiable_certificate_is_fatal_and_ca_cert_fixes_it(
    aiohttp_server: Any, tmp_path: Path
) -> None:
    paths = ensure_self_signed(tmp_path, ["127.0.0.1"])
    orchestrator = Orchestrator(aiohttp_server)
    await orchestrator.start(ssl=server_ssl_context(paths.cert, paths.key))
    assert orchestrator.url.startswith("https://")
    with pytest.raises(TlsVerificationFailed) as raised:
        await make_agent(orchestrator.url).run()
    assert "--ssl-no-verify" in str(raised.value) and "--ca-cert" in str(raised.value)
    assert orchestrator.proto.requests == []
    for options in ({"ca_cert": paths.cert}, {"ssl_no_verify": True}):
        before = len(orchestrator.proto.stream_opens)
        agent = make_agent(orchestrator.url, **options)
        async with running(agent):
            await eventually(
                lambda: len(orchestrator.proto.stream_opens) > before,  # noqa: B023
                f"a TLS connection with {options}",
            )


class SlowStopExecutor(FakeExecutor):
    """A cancelled job's process takes a while to exit: the test ends it."""

    async def cancel(self, reason: str = "cancelled", preempt_grace_s: float | None = None) -> None:
        self.cancels.append(reason)


async def test_a_job_sent_again_after_abandon_runs_once_the_old_process_stops(
    orch: Orchestrator,
) -> None:
    server = orch.proto
    executor = SlowStopExecutor()
    agent = make_agent(orch.url, executor=executor, persistent=False)
    server.register_answers = [{}, {"abandon_job": "j_1"}]
    async with running(agent) as task:
        old = await start_job(server, executor)
        server.drop_streams()
        await eventually(lambda: executor.cancels, "the abandoned job to be stopped")
        event_id = server.push("job_submit", job_id="j_1", attempt=2, config={})
        await eventually(lambda: agent.last_event_id == str(event_id), "the new dispatch")
        assert len(executor.runs) == 1  # never two processes at once
        old.finish.set_result(JobOutcome("cancelled", -15, "abandoned", []))
        await eventually(lambda: len(executor.runs) == 2, "the new attempt to start")
        assert not task.done()  # the ephemeral worker has not had its job yet
        assert executor.current is not None
        executor.current.complete()
        await eventually(task.done, "the ephemeral worker to leave after its job")
    assert [spec.attempt for spec in executor.runs] == [1, 2]
    assert server.status_words("j_1") == ["starting", "running", "starting", "running", "completed"]


async def test_a_queued_dispatch_cancelled_before_it_starts_never_runs(
    orch: Orchestrator,
) -> None:
    server = orch.proto
    executor = SlowStopExecutor()
    agent = make_agent(orch.url, executor=executor)
    server.register_answers = [{}, {"abandon_job": "j_1"}]
    async with running(agent):
        old = await start_job(server, executor)
        server.drop_streams()
        await eventually(lambda: executor.cancels, "the abandoned job to be stopped")
        server.push("job_submit", job_id="j_2", config={})
        last = server.push("job_cancel", job_id="j_2", reason="changed my mind")
        await eventually(lambda: agent.last_event_id == str(last), "both events")
        old.finish.set_result(JobOutcome("cancelled", -15, "abandoned", []))
        await eventually(lambda: agent.state == "idle", "the slot to be free")
    assert [spec.job_id for spec in executor.runs] == ["j_1"]
    assert server.statuses("j_2") == []
