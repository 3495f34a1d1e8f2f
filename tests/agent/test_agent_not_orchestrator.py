"""An agent pointed at something that is not an orchestrator (a web server answering
501 or an HTML page) stops after a few tries saying what is wrong, never printing the
page; one given http:// for an HTTPS orchestrator says to use https://."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import structlog
from agent_loop_testkit import make_agent
from aiohttp import web

from tunefleet.agent.client import (
    NOT_AN_ORCHESTRATOR_STRIKES,
    NotAnOrchestratorGiveUp,
    WrongScheme,
)
from tunefleet.agent.probe import describe_body
from tunefleet.http.tls import ensure_self_signed, server_ssl_context

pytestmark = pytest.mark.timeout(30)

PAGE = (
    "<!DOCTYPE html><html><head><title>Error response</title></head><body>"
    "<h1>Error response</h1><p>Error code: 501</p>" + "x" * 2000 + "</body></html>"
)


class WebServer:
    """Any web server: every request gets ``status`` and an HTML page."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.hits = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        return app

    async def _answer(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.Response(status=self.status, text=PAGE, content_type="text/html")


async def serve(aiohttp_server: Any, status: int) -> tuple[WebServer, str]:
    server = WebServer(status)
    test_server = await aiohttp_server(server.app())
    return server, str(test_server.make_url("")).rstrip("/")


@pytest.mark.parametrize("status", [501, 200, 400, 500])
async def test_a_web_server_that_is_not_an_orchestrator_stops_the_agent_quickly(
    aiohttp_server: Any, status: int
) -> None:
    server, url = await serve(aiohttp_server, status)
    agent = make_agent(url)
    with (
        structlog.testing.capture_logs() as logs,
        pytest.raises(NotAnOrchestratorGiveUp) as raised,
    ):
        await asyncio.wait_for(agent.run(), 10)
    message = str(raised.value)
    assert message.startswith(
        f"{url} answered HTTP {status} with an HTML page titled 'Error response', not the "
        "orchestrator's JSON: it is not a tunefleet (or SimpleTuner) orchestrator. Check "
        "--orchestrator-url"
    )
    assert server.hits == NOT_AN_ORCHESTRATOR_STRIKES
    assert "<" not in message
    assert all("<" not in str(entry) for entry in logs), "no page in the log either"


async def test_a_proxy_whose_orchestrator_is_away_is_waited_for(aiohttp_server: Any) -> None:
    """502 is what a reverse proxy says while the orchestrator restarts: keep trying."""
    server, url = await serve(aiohttp_server, 502)
    agent = make_agent(url)
    task = asyncio.create_task(agent.run())
    try:
        for _ in range(200):
            if server.hits > NOT_AN_ORCHESTRATOR_STRIKES + 2:
                break
            await asyncio.sleep(0.02)
        assert server.hits > NOT_AN_ORCHESTRATOR_STRIKES + 2
        assert not task.done()
    finally:
        agent.request_stop()
        await asyncio.wait_for(task, 10)


async def test_http_at_an_https_orchestrator_says_to_use_https(tmp_path: Path) -> None:
    paths = ensure_self_signed(tmp_path / "tls", ["127.0.0.1"])

    async def register(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/api/workers/register", register)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(
        runner, "127.0.0.1", 0, ssl_context=server_ssl_context(paths.cert, paths.key)
    )
    await site.start()
    port = runner.addresses[0][1]
    try:
        agent = make_agent(f"http://127.0.0.1:{port}")
        with pytest.raises(WrongScheme) as raised:
            await asyncio.wait_for(agent.run(), 10)
    finally:
        await runner.cleanup()
    assert str(raised.value) == (
        f"http://127.0.0.1:{port} closed the connection without answering, and its port "
        f"speaks HTTPS: the orchestrator serves TLS (tunefleet server --ssl). Use "
        f"https://127.0.0.1:{port} (with --ca-cert for a self-signed certificate)."
    )


def test_bodies_are_described_without_markup() -> None:
    assert describe_body({"detail": "Invalid worker token"}) == "Invalid worker token"
    assert describe_body(PAGE) == "an HTML page titled 'Error response'"
    assert describe_body("<html><body>hi</body></html>") == "an HTML page"
    assert describe_body("") == "(no detail)"
    assert describe_body("plain\ntext") == "plain text"
