"""The administrator's worker_type and name, from the registration answer, against the
agent's own --persistent and --name: the administrator's are in force, and a
disagreement is logged once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog
from agent_loop_testkit import FakeExecutor, ProtocolServer, eventually, make_agent, running

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def proto(aiohttp_server: Any) -> tuple[ProtocolServer, str]:
    server = ProtocolServer()
    test_server = await aiohttp_server(server.app())
    return server, str(test_server.make_url("")).rstrip("/")


def warnings_of(logs: list[dict[str, Any]]) -> list[str]:
    return [str(e["event"]) for e in logs if e["log_level"] == "warning"]


async def test_an_ephemeral_agent_of_a_persistent_worker_stays_after_its_job(
    proto: tuple[ProtocolServer, str],
) -> None:
    server, url = proto
    server.register_answers.append({"name": "test-worker", "worker_type": "persistent"})
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor, persistent=False)
    with structlog.testing.capture_logs() as logs:
        async with running(agent) as task:
            await eventually(lambda: server.stream_opens, "the stream to open")
            server.push("job_submit", job_id="j_1", config={})
            await eventually(lambda: executor.current is not None, "the job to start")
            executor.current.complete()  # type: ignore[union-attr]
            await eventually(lambda: "completed" in server.status_words("j_1"), "the report")
            await asyncio.sleep(0.3)
            assert not task.done(), "a persistent worker's agent stays online"
            server.push("job_submit", job_id="j_2", config={})
            await eventually(
                lambda: executor.current is not None and executor.current.spec.job_id == "j_2",
                "the next job",
            )
    assert server.registrations[0]["persistent"] is False  # the agent still says how it ran
    [warning] = warnings_of(logs)
    assert warning.startswith(
        "The administrator made this worker persistent, but the agent was started "
        "ephemeral (--persistent / SIMPLETUNER_WORKER_PERSISTENT); it follows the worker "
        "type and stays online between jobs."
    )


async def test_a_persistent_agent_of_an_ephemeral_worker_leaves_after_its_job(
    proto: tuple[ProtocolServer, str],
) -> None:
    server, url = proto
    server.register_answers.append({"name": "test-worker", "worker_type": "ephemeral"})
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor, persistent=True)
    with structlog.testing.capture_logs() as logs:
        async with running(agent) as task:
            await eventually(lambda: server.stream_opens, "the stream to open")
            server.push("job_submit", job_id="j_1", config={})
            await eventually(lambda: executor.current is not None, "the job to start")
            executor.current.complete()  # type: ignore[union-attr]
            await eventually(task.done, "the agent to leave")
    assert any("made this worker ephemeral" in w for w in warnings_of(logs))


async def test_a_different_name_is_logged_once(proto: tuple[ProtocolServer, str]) -> None:
    server, url = proto
    answer = {"name": "gpu-worker-1", "worker_type": "persistent"}
    server.register_answers += [answer, answer]
    agent = make_agent(url, name="my-laptop", persistent=True)
    with structlog.testing.capture_logs() as logs:
        async with running(agent):
            await eventually(lambda: server.stream_opens, "the stream to open")
            server.drop_streams()
            await eventually(lambda: len(server.registrations) == 2, "a second registration")
    assert (
        warnings_of(logs).count(
            "The orchestrator knows this worker as 'gpu-worker-1'; the agent's name 'my-laptop' "
            "(--name / SIMPLETUNER_WORKER_NAME, default the host name) is shown beside it but "
            "not used."
        )
        == 1
    )


async def test_an_orchestrator_that_says_nothing_leaves_the_agents_own_settings(
    proto: tuple[ProtocolServer, str],
) -> None:
    """SimpleTuner's orchestrator answers only the protocol's four fields."""
    server, url = proto
    executor = FakeExecutor()
    agent = make_agent(url, executor=executor, persistent=False, name="other-name")
    with structlog.testing.capture_logs() as logs:
        async with running(agent) as task:
            await eventually(lambda: server.stream_opens, "the stream to open")
            server.push("job_submit", job_id="j_1", config={})
            await eventually(lambda: executor.current is not None, "the job to start")
            executor.current.complete()  # type: ignore[union-attr]
            await eventually(task.done, "the ephemeral agent to leave")
    assert warnings_of(logs) == []


def test_the_reconnect_timeout_default_follows_the_type_in_force() -> None:
    from tunefleet.agent.identity import reconnect_limit_s
    from tunefleet.agent.settings import DEFAULT_EPHEMERAL_RECONNECT_TIMEOUT_S, resolve_settings

    started_ephemeral, _ = resolve_settings(orchestrator_url="http://o:1", worker_token="wt_x")
    assert reconnect_limit_s(started_ephemeral, persistent=True) is None
    assert (
        reconnect_limit_s(started_ephemeral, persistent=False)
        == DEFAULT_EPHEMERAL_RECONNECT_TIMEOUT_S
    )
    given, _ = resolve_settings(
        orchestrator_url="http://o:1", worker_token="wt_x", reconnect_timeout_s=60.0
    )
    assert reconnect_limit_s(given, persistent=True) == 60.0
