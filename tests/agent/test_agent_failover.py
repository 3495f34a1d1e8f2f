"""Several orchestrator URLs: the agent's client moves to the active orchestrator when
the one it talks to answers 503 or cannot be reached, and only ever to a listed URL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.e2e.harness import free_port
from tunefleet.agent.client import OrchestratorUnreachable, WorkerClient
from tunefleet.agent.settings import SettingsError, resolve_settings

Handler = Callable[[web.Request], Any]


def _app(register: Handler) -> web.Application:
    app = web.Application()
    app.router.add_post("/api/workers/register", register)
    return app


async def _registered(request: web.Request) -> web.StreamResponse:
    return web.json_response({"worker_id": "w_1", "sse_url": "/api/workers/stream?worker_id=w_1"})


@pytest.fixture
async def servers() -> AsyncIterator[list[TestServer]]:
    started: list[TestServer] = []
    yield started
    for server in started:
        await server.close()


async def _serve(servers: list[TestServer], register: Handler) -> str:
    server = TestServer(_app(register), host="127.0.0.1")
    await server.start_server()
    servers.append(server)
    return str(server.make_url("")).rstrip("/")


def _standby(active_url: str | None) -> Handler:
    async def register(request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {"detail": "this orchestrator is a standby", "active_url": active_url},
            status=503,
            headers={"Retry-After": "1"},
        )

    return register


async def test_a_standby_503_moves_the_client_to_the_active_url_it_names(
    servers: list[TestServer],
) -> None:
    active = await _serve(servers, _registered)
    other = await _serve(servers, _registered)
    standby = await _serve(servers, _standby(active))
    async with WorkerClient([standby, other, active], "wt_x") as client:
        with pytest.raises(OrchestratorUnreachable, match="standby"):
            await client.register({})
        assert client.base_url == active and client.untried_url  # skipped `other`
        assert client.retry_after_s == 1.0  # the standby said when to ask again
        assert (await client.register({})).worker_id == "w_1"
        assert client.failovers == 1 and not client.untried_url
        assert client.retry_after_s is None


async def test_a_url_that_is_not_listed_is_never_followed(servers: list[TestServer]) -> None:
    listed = await _serve(servers, _registered)
    standby = await _serve(servers, _standby("http://elsewhere.example:8001"))
    async with WorkerClient([standby, listed], "wt_x") as client:
        with pytest.raises(OrchestratorUnreachable):
            await client.register({})
        assert client.base_url == listed  # the next listed one, not the named one


async def test_a_refused_connection_moves_to_the_next_url(servers: list[TestServer]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    alive = await _serve(servers, _registered)
    async with WorkerClient([dead, alive], "wt_x") as client:
        with pytest.raises(OrchestratorUnreachable, match="Connection refused"):
            await client.register({})
        assert client.base_url == alive
        assert (await client.register({})).worker_id == "w_1"


async def test_both_down_the_client_goes_round_without_untried_urls(
    servers: list[TestServer],
) -> None:
    first, second = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
    async with WorkerClient([first, second], "wt_x") as client:
        for _ in range(3):
            with pytest.raises(OrchestratorUnreachable):
                await client.register({})
        assert client.failovers == 3 and not client.untried_url  # back-off as usual


async def test_one_url_stays_put(servers: list[TestServer]) -> None:
    standby = await _serve(servers, _standby(None))
    async with WorkerClient(standby, "wt_x") as client:
        with pytest.raises(OrchestratorUnreachable):
            await client.register({})
        assert client.base_url == standby and client.failovers == 0


def test_settings_read_a_comma_separated_list() -> None:
    settings, _ = resolve_settings(
        orchestrator_url=" http://127.0.0.1:8001/ , http://127.0.0.1:8002",
        worker_token="wt_x",
        persistent=True,
    )
    assert settings.urls == ("http://127.0.0.1:8001", "http://127.0.0.1:8002")
    assert settings.orchestrator_url == "http://127.0.0.1:8001"
    single, _ = resolve_settings(orchestrator_url="http://127.0.0.1:8001", worker_token="wt_x")
    assert single.orchestrator_urls == () and single.urls == ("http://127.0.0.1:8001",)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("http://a:1,,http://b:2", "has an empty entry"),
        ("http://a:1,http://a:1", "names a URL twice"),
        ("http://a:1,ftp://b", "must start with http:// or https://"),
    ],
)
def test_a_bad_list_is_refused_saying_how_to_write_it(raw: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        resolve_settings(orchestrator_url=raw, worker_token="wt_x")


def test_each_plain_http_url_off_loopback_is_warned_about() -> None:
    _, warnings = resolve_settings(
        orchestrator_url="http://127.0.0.1:1,http://orch-b.example:8001", worker_token="wt_x"
    )
    assert [w for w in warnings if "unencrypted" in w] == [
        "The worker token travels unencrypted to http://orch-b.example:8001; use https:// "
        "(tunefleet server --ssl, or TLS at a reverse proxy) outside a trusted network."
    ]


@pytest.mark.parametrize(
    ("header", "seconds"), [("1", 1.0), ("0.5", 0.5), ("3600", 60.0), ("soon", None), ("-1", None)]
)
def test_retry_after_is_read_in_seconds_and_bounded(header: str, seconds: float | None) -> None:
    from tunefleet.agent.client import _retry_after

    assert _retry_after(header) == seconds


async def test_jobs_after_a_failover_resolve_endpoints_against_the_new_orchestrator(
    servers: list[TestServer],
) -> None:
    from tests.agent.agent_loop_testkit import make_agent
    from tunefleet.agent.client import Registration

    dead = f"http://127.0.0.1:{free_port()}"
    alive = await _serve(servers, _registered)
    agent = make_agent(dead, orchestrator_urls=(dead, alive))
    assert agent.jobs.base_url == dead
    with pytest.raises(OrchestratorUnreachable):
        await agent.client.register({})
    registration = await agent.client.register({})
    agent._on_registered(registration)
    assert isinstance(registration, Registration) and agent.jobs.base_url == alive
    await agent.client.close()
