"""The agent against a small protocol server: registration, the stream, jobs, drain,
shutdown, stopping, invalid tokens."""

from __future__ import annotations

from typing import Any

import pytest
from agent_loop_testkit import (
    TOKEN,
    WORKER_ID,
    FakeExecutor,
    ProtocolServer,
    eventually,
    make_agent,
    running,
)

from tunefleet import __version__
from tunefleet.agent.client import API_TOKEN_GIVEN_MESSAGE, INVALID_TOKEN_MESSAGE, InvalidToken
from tunefleet.agent.job_events import ArtifactPlan

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def proto(aiohttp_server: Any) -> tuple[ProtocolServer, str]:
    server = ProtocolServer()
    test_server = await aiohttp_server(server.app())
    return server, str(test_server.make_url("")).rstrip("/")


async def test_registers_with_gpu_fields_labels_and_token(
    proto: tuple[ProtocolServer, str],
) -> None:
    server, url = proto
    agent = make_agent(url)
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
    body = server.registrations[0]
    assert server.of("/register")[0].headers["X-Worker-Token"] == TOKEN
    assert body["name"] == "test-worker"
    assert body["persistent"] is True
    assert body["labels"] == {"zone": "test"}
    assert body["current_job_id"] is None
    assert body["gpu_info"]["name"] == "NVIDIA A100-SXM4-80GB"
    assert body["gpu_info"]["count"] == 1
    assert (body["gpu_count"], body["gpu_name"], body["gpu_vram_gb"]) == (
        1,
        "NVIDIA A100-SXM4-80GB",
        79.2,
    )
    assert body["accelerator_type"] == "cuda"
    assert (body["hostname"], body["agent_version"]) == ("test-host", __version__)
    assert server.stream_opens == [None]  # nothing seen yet: no Last-Event-ID
    assert agent.worker_id == WORKER_ID


async def test_heartbeats_carry_state_and_gpu_load(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    agent = make_agent(url)
    async with running(agent):
        await eventually(lambda: len(server.heartbeats) >= 2, "two heartbeats")
        assert agent.state == "idle"
    beat = server.heartbeats[0]
    assert beat == {
        "worker_id": WORKER_ID,
        "status": "idle",
        "current_job_id": None,
        "job_progress": None,
        "gpu_utilization": [42.0],
        "vram_used_gb": [10.5],
    }


async def test_reconnects_with_last_event_id_and_registers_again(
    proto: tuple[ProtocolServer, str],
) -> None:
    server, url = proto
    agent = make_agent(url)
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("ping")
        server.push("ping")
        await eventually(lambda: agent.last_event_id == "2", "both events to arrive")
        server.drop_streams()
        await eventually(lambda: len(server.stream_opens) == 2, "a second stream")
    assert server.stream_opens == [None, "2"]
    assert len(server.registrations) == 2


async def test_a_heartbeat_told_offline_registers_again(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    agent = make_agent(url)
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.heartbeat_refusals = 1
        await eventually(lambda: len(server.registrations) == 2, "a second registration")
        await eventually(lambda: len(server.stream_opens) == 2, "a second stream")
        assert agent.state == "idle"


async def test_a_silent_stream_counts_as_lost(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    agent = make_agent(url, stream_timeout_s=0.3)
    async with running(agent):
        await eventually(lambda: len(server.stream_opens) >= 2, "a reconnect after silence")
    assert len(server.registrations) >= 2


async def test_pings_keep_a_quiet_stream_alive(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    # Timeout 20 ping intervals, so a loaded machine's scheduling jitter cannot pass for
    # silence; 60 pings then span three timeouts.
    server.ping_interval_s = 0.05
    agent = make_agent(url, stream_timeout_s=1.0)
    async with running(agent):
        await eventually(lambda: server.pings_sent >= 60, "3 s of pings, 1 s timeout", 15.0)
    assert len(server.stream_opens) == 1


async def test_job_reports_go_out_in_order(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor)
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push(
            "job_submit",
            job_id="j_1",
            attempt=2,
            config={"lr": 1e-4},
            dataloader=[{"id": "ds"}],
            upload_endpoint="/api/upload/j_1",
            upload_token="up",
            hf_token="hf",
            env={"EXTRA": "1"},
        )
        await eventually(lambda: executor.current is not None, "the job to start")
        job = executor.current
        assert job is not None
        assert agent.state == "busy"
        await job.log("epoch 1", "epoch 2")
        await job.progress(step=10, total=100)
        await eventually(
            lambda: any(b["job_progress"] for b in server.heartbeats), "a heartbeat with progress"
        )
        job.complete()
        await eventually(lambda: "completed" in server.status_words("j_1"), "the completion")
        await eventually(lambda: agent.state == "idle", "the worker to be idle again")
    spec = executor.runs[0]
    assert (spec.job_id, spec.attempt, spec.config, spec.dataloader) == (
        "j_1",
        2,
        {"lr": 1e-4},
        [{"id": "ds"}],
    )
    assert spec.env == {
        "EXTRA": "1",
        "SIMPLETUNER_UPLOAD_ENDPOINT": url + "/api/upload/j_1",
        "SIMPLETUNER_UPLOAD_TOKEN": "up",
        "TUNEFLEET_UPLOAD_ENDPOINT": url + "/api/upload/j_1",
        "TUNEFLEET_UPLOAD_TOKEN": "up",
        "HF_TOKEN": "hf",
    }
    assert spec.artifacts == ArtifactPlan(url + "/api/upload/j_1", "up", None)
    assert "token" not in repr(spec.artifacts)  # the token never reaches a log line
    bodies = server.statuses("j_1")
    words = [b["status"] for b in bodies]
    assert words[:2] == ["starting", "running"]
    assert set(words[2:-1]) <= {"running"}  # progress goes out as "running" reports
    assert bodies[-2]["progress"] == {"step": 10, "total": 100}
    assert bodies[-1] == {
        "status": "completed",
        "progress": {"step": 10, "total": 100},
        "error": None,
        "attempt": 2,
    }
    assert {b["attempt"] for b in bodies} == {2}  # every report names the dispatch it is about
    assert [line["line"] for line in server.log_lines("j_1")] == ["epoch 1", "epoch 2"]
    assert server.of("/logs")[0].body["attempt"] == 2
    busy = [b for b in server.heartbeats if b["status"] == "busy"]
    assert busy and busy[-1]["current_job_id"] == "j_1"
    assert busy[-1]["job_progress"] == {"step": 10, "total": 100}


async def test_repeated_or_concurrent_job_submits_are_ignored(
    proto: tuple[ProtocolServer, str],
) -> None:
    server, url = proto
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor)
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit", job_id="j_1", config={})
        await eventually(lambda: executor.current is not None, "the job to start")
        server.push("job_submit", job_id="j_1", config={})
        server.push("job_submit", job_id="j_2", config={})
        await eventually(lambda: agent.last_event_id == "3", "all three events")
        assert executor.current is not None
        executor.current.complete()
        await eventually(lambda: "completed" in server.status_words("j_1"), "the completion")
        server.push("job_submit", job_id="j_1", config={})  # a replay after the end
        await eventually(lambda: agent.last_event_id == "4", "the replayed event")
    assert [spec.job_id for spec in executor.runs] == ["j_1"]
    assert server.statuses("j_2") == []


async def test_job_cancel_stops_the_job_and_reports_cancelled(
    proto: tuple[ProtocolServer, str],
) -> None:
    server, url = proto
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor)
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit", job_id="j_1", config={})
        await eventually(lambda: executor.current is not None, "the job to start")
        server.push("job_cancel", job_id="j_other")
        server.push("job_cancel", job_id="j_1", reason="user asked")
        await eventually(lambda: "cancelled" in server.status_words("j_1"), "the cancel report")
    assert executor.cancels[0] == "user asked"
    assert executor.preempt_graces[0] is None  # a plain cancel: the executor's own grace
    assert server.statuses("j_1")[-1]["error"] == "user asked"


async def test_a_preempting_job_cancel_gives_the_trainer_the_orchestrators_grace(
    proto: tuple[ProtocolServer, str],
) -> None:
    server, url = proto
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor)
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit", job_id="j_1", config={})
        await eventually(lambda: executor.current is not None, "the job to start")
        server.push("job_cancel", job_id="j_1", reason="reclaim", preempt=True, grace_seconds=90)
        await eventually(lambda: "cancelled" in server.status_words("j_1"), "the stop report")
    assert (executor.cancels, executor.preempt_graces) == (["reclaim"], [90])
    assert server.statuses("j_1")[-1]["error"] == "reclaim"


async def test_drain_finishes_the_job_and_stays_draining(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor)
    async with running(agent) as task:
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit", job_id="j_1", config={})
        await eventually(lambda: executor.current is not None, "the job to start")
        server.push("drain")
        await eventually(lambda: agent.state == "draining", "the drain")
        assert executor.cancels == []  # the running job is not stopped
        executor.current.complete()  # type: ignore[union-attr]
        await eventually(lambda: "completed" in server.status_words("j_1"), "the completion")
        await eventually(
            lambda: (
                server.heartbeats[-1]["status"] == "draining"
                and server.heartbeats[-1]["current_job_id"] is None
            ),
            "a draining heartbeat after the job",
        )
        assert not task.done()  # a persistent worker stays connected
        # Dispatching again is how the orchestrator lifts a drain (admin resume).
        server.push("job_submit", job_id="j_2", config={})
        await eventually(lambda: len(executor.runs) == 2, "the job after the drain was lifted")
        assert agent.state == "busy"


async def test_ephemeral_worker_exits_after_its_job(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor, persistent=False)
    async with running(agent) as task:
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit", job_id="j_1", config={})
        await eventually(lambda: executor.current is not None, "the job to start")
        executor.current.complete()  # type: ignore[union-attr]
        await eventually(task.done, "the agent to exit")
        assert task.exception() is None
    assert server.registrations[0]["persistent"] is False
    assert server.status_words("j_1") == ["starting", "running", "completed"]
    posts = [r for r in server.requests if r.method == "POST" and "heartbeat" not in r.path]
    last, before = posts[-1], posts[-2]
    assert (last.path, last.body) == ("/api/workers/disconnect", {"worker_id": WORKER_ID})
    assert before.body["status"] == "completed"  # disconnect only after the report
    assert agent.state == "offline"


async def test_ephemeral_worker_drained_while_idle_exits(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    agent = make_agent(url, persistent=False)
    async with running(agent) as task:
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("drain")
        await eventually(task.done, "the agent to exit")
    assert len(server.disconnects) == 1


async def test_shutdown_event_stops_the_job_reports_it_and_exits(
    proto: tuple[ProtocolServer, str],
) -> None:
    server, url = proto
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor)
    async with running(agent) as task:
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit", job_id="j_1", config={})
        await eventually(lambda: executor.current is not None, "the job to start")
        server.push("shutdown", reason="worker deleted by an administrator")
        await eventually(task.done, "the agent to exit")
        assert task.exception() is None
    assert server.status_words("j_1")[-1] == "cancelled"
    assert "worker deleted by an administrator" in executor.cancels[0]
    assert len(server.disconnects) == 1


async def test_stop_request_cancels_reports_and_disconnects(
    proto: tuple[ProtocolServer, str],
) -> None:
    """The SIGTERM path: handle_signal is what the signal handler calls."""
    server, url = proto
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor)
    async with running(agent) as task:
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit", job_id="j_1", config={})
        await eventually(lambda: executor.current is not None, "the job to start")
        agent.handle_signal("SIGTERM")
        await eventually(task.done, "the agent to exit")
        assert task.exception() is None
    assert executor.cancels == ["worker agent stopped by SIGTERM"]
    assert server.statuses("j_1")[-1] == {
        "status": "cancelled",
        "progress": None,
        "error": "worker agent stopped by SIGTERM",
        "attempt": 1,
    }
    posts = [r.path for r in server.requests if r.method == "POST"]
    assert posts[-1] == "/api/workers/disconnect"


async def test_invalid_token_exits_without_retrying(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    server.token = "wt_someone_else_entirely"
    agent = make_agent(url)
    with pytest.raises(InvalidToken) as raised:
        await agent.run()
    assert str(raised.value) == INVALID_TOKEN_MESSAGE
    assert "rotated" in str(raised.value)
    assert len(server.requests) == 1


async def test_an_api_token_given_to_the_agent_says_a_worker_token_is_needed(
    proto: tuple[ProtocolServer, str],
) -> None:
    server, url = proto
    agent = make_agent(url, worker_token="tf_" + "a" * 43)
    with pytest.raises(InvalidToken) as raised:
        await agent.run()
    assert str(raised.value) == API_TOKEN_GIVEN_MESSAGE
    assert "it is an API token (tf_...)" in str(raised.value)
    assert "needs a worker token (wt_...)" in str(raised.value)
    assert len(server.requests) == 1


async def test_token_rotated_while_running_exits(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor)
    async with running(agent) as task:
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit", job_id="j_1", config={})
        await eventually(lambda: executor.current is not None, "the job to start")
        server.token = "wt_rotated_token_value"
        await eventually(task.done, "the agent to exit")
        assert isinstance(task.exception(), InvalidToken)
        rejected = len(server.requests)
    assert executor.cancels  # the job does not outlive its agent
    assert server.disconnects == []
    assert len(server.requests) == rejected  # and nothing was retried afterwards


class StubbornExecutor(FakeExecutor):
    """A job that ignores the graceful stop (the real executor would SIGKILL it later)."""

    async def cancel(self, reason: str = "cancelled", preempt_grace_s: float | None = None) -> None:
        self.cancels.append(reason)


async def test_second_signal_stops_without_waiting(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    executor = StubbornExecutor()
    agent = make_agent(url, executor=executor, stop_timeout_s=60.0)
    async with running(agent) as task:
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit", job_id="j_1", config={})
        await eventually(lambda: executor.current is not None, "the job to start")
        agent.handle_signal("SIGTERM")
        await eventually(lambda: executor.cancels, "the graceful stop")
        assert not task.done()  # waiting for the job to end
        agent.handle_signal("SIGINT")
        await eventually(task.done, "the forced stop (well before the 60 s stop timeout)")
    assert agent.state == "offline"


class BrokenExecutor(FakeExecutor):
    async def run(self, spec: Any, on_event: Any) -> Any:
        raise OSError("work directory is read-only")


async def test_an_executor_failure_is_reported_as_a_failed_job(
    proto: tuple[ProtocolServer, str],
) -> None:
    server, url = proto
    agent = make_agent(url, executor=BrokenExecutor())
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit", job_id="j_1", config={})
        await eventually(lambda: "failed" in server.status_words("j_1"), "the failure report")
        await eventually(lambda: agent.state == "idle", "the worker to be idle again")
    assert server.status_words("j_1") == ["starting", "failed"]
    assert "work directory is read-only" in server.statuses("j_1")[-1]["error"]


async def test_unreadable_events_are_skipped(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    agent = make_agent(url)
    async with running(agent):
        await eventually(lambda: server.stream_opens, "the stream to open")
        server.push("job_submit")  # no job_id
        server.push("mystery", detail="from a newer orchestrator")
        server.push("ping")
        await eventually(lambda: agent.last_event_id == "3", "all events read")
        assert agent.state == "idle"
