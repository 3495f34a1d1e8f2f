"""The server's one middleware does what the timing, error and standby middlewares did
together, in their order: the metric sees the status the client got, every answer carries
its request id, a process that is not active refuses with 503."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, make_mocked_request

from tests.server_support.test_support_metrics import http_count
from tunefleet.errors import TunefleetError
from tunefleet.http.errors import REQUEST_ID_HEADER, ApiError, request_id_on_prepare
from tunefleet.http.front_door import app_front_door, front_door
from tunefleet.http.metrics import route_label
from tunefleet.metrics import Metrics

ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]


class Conflict(TunefleetError):
    status = 409


METRICS_KEY = web.AppKey("metrics", Metrics)
LEADERSHIP_KEY: web.AppKey[Any] = web.AppKey("leadership")


def build_app(
    metrics: Metrics | None, leadership: Any = None, *, by_keys: bool = False
) -> web.Application:
    """``by_keys``: the server's ``app_front_door``, finding both on the app."""

    async def job(request: web.Request) -> web.Response:
        return web.json_response({"job": request.match_info["job_id"]})

    async def refused(_: web.Request) -> web.Response:
        raise ApiError(409, "worker is offline; register again")

    async def domain(_: web.Request) -> web.Response:
        raise Conflict("job has ended")

    async def broken(_: web.Request) -> web.Response:
        raise RuntimeError("secret internals")

    async def moved(_: web.Request) -> web.Response:
        raise web.HTTPFound("/elsewhere")

    async def streamed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"x")
        return response

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def home(_: web.Request) -> web.Response:
        return web.Response(text="ui")

    if by_keys:
        app = web.Application(middlewares=[app_front_door(METRICS_KEY, LEADERSHIP_KEY)])
        if metrics is not None:
            app[METRICS_KEY] = metrics
        if leadership is not None:
            app[LEADERSHIP_KEY] = leadership
    else:
        app = web.Application(middlewares=[front_door(lambda _: metrics, lambda _: leadership)])
    app.router.add_get("/api/jobs/{job_id}", job)
    app.router.add_post("/api/refused", refused)
    app.router.add_post("/api/domain", domain)
    app.router.add_get("/api/broken", broken)
    app.router.add_get("/api/moved", moved)
    app.router.add_get("/api/streamed", streamed)
    app.router.add_get("/healthz", health)
    app.router.add_get("/", home)
    return app


@pytest.mark.parametrize("by_keys", [False, True])
async def test_answers_carry_a_request_id_and_are_measured(
    aiohttp_client: ClientFactory, by_keys: bool
) -> None:
    metrics = Metrics()
    client = await aiohttp_client(build_app(metrics, by_keys=by_keys))
    ok = await client.get("/api/jobs/j_1")
    assert ok.status == 200 and len(ok.headers[REQUEST_ID_HEADER]) == 16
    kept = await client.get("/api/jobs/j_2", headers={REQUEST_ID_HEADER: "lb-42"})
    assert kept.headers[REQUEST_ID_HEADER] == "lb-42"
    assert http_count(metrics, "GET", "/api/jobs/{job_id}", "200") == 2


@pytest.mark.parametrize("by_keys", [False, True])
async def test_failures_are_json_details_with_their_status(
    aiohttp_client: ClientFactory, by_keys: bool
) -> None:
    metrics = Metrics()
    client = await aiohttp_client(build_app(metrics, by_keys=by_keys))
    refused = await client.post("/api/refused")
    assert refused.status == 409
    assert await refused.json() == {"detail": "worker is offline; register again"}
    assert (await (await client.post("/api/domain")).json()) == {"detail": "job has ended"}
    broken = await client.get("/api/broken")
    rid = broken.headers[REQUEST_ID_HEADER]
    assert broken.status == 500
    assert (await broken.json())["detail"] == (
        f"internal error; see the orchestrator log (request id {rid})"
    )
    missing = await client.get("/no/such/path")
    assert missing.status == 404 and REQUEST_ID_HEADER in missing.headers
    assert http_count(metrics, "POST", "/api/refused", "409") == 1
    assert http_count(metrics, "POST", "/api/domain", "409") == 1
    assert http_count(metrics, "GET", "/api/broken", "500") == 1
    assert http_count(metrics, "GET", "unmatched", "404") == 1


async def test_redirects_and_streams_keep_the_request_id(aiohttp_client: ClientFactory) -> None:
    metrics = Metrics()
    app = build_app(metrics)
    app.on_response_prepare.append(request_id_on_prepare)
    client = await aiohttp_client(app)
    moved = await client.get("/api/moved", allow_redirects=False)
    assert moved.status == 302 and REQUEST_ID_HEADER in moved.headers
    streamed = await client.get("/api/streamed")
    assert streamed.status == 200 and REQUEST_ID_HEADER in streamed.headers
    assert http_count(metrics, "GET", "/api/moved", "302") == 1
    assert http_count(metrics, "GET", "/api/streamed", "200") == 1


def standby(role: str = "standby") -> Any:
    return SimpleNamespace(
        role=role, active_url="http://a:8001", advertise_url="http://b:8001", term=None
    )


@pytest.mark.parametrize("by_keys", [False, True])
async def test_a_standby_refuses_with_503_naming_the_active_one(
    aiohttp_client: ClientFactory, by_keys: bool
) -> None:
    metrics = Metrics()
    client = await aiohttp_client(build_app(metrics, standby(), by_keys=by_keys))
    refused = await client.get("/api/jobs/j_1")
    assert refused.status == 503
    assert refused.headers["Retry-After"] == "1"
    assert REQUEST_ID_HEADER in refused.headers
    body = await refused.json()
    assert body["active_url"] == "http://a:8001"
    assert body["detail"].startswith("this orchestrator is a standby; the active orchestrator")
    assert (await client.get("/healthz")).status == 200
    home = await client.get("/?view=queue", allow_redirects=False)
    assert home.status == 307 and home.headers["Location"] == "http://a:8001/?view=queue"
    assert REQUEST_ID_HEADER in home.headers
    assert http_count(metrics, "GET", "/api/jobs/{job_id}", "503") == 1
    assert http_count(metrics, "GET", "/", "307") == 1


async def test_an_active_one_and_an_app_without_leadership_serve(
    aiohttp_client: ClientFactory,
) -> None:
    for leadership in (standby("active"), None):
        client = await aiohttp_client(build_app(None, leadership))
        assert (await client.get("/api/jobs/j_1")).status == 200


async def test_a_cancelled_handler_is_counted_as_client_closed() -> None:
    metrics = Metrics()
    middleware = front_door(lambda _: metrics, lambda _: None)

    async def stream(_: web.Request) -> web.StreamResponse:
        raise asyncio.CancelledError

    app = web.Application()
    app.router.add_get("/api/workers/stream", stream)
    request = make_mocked_request("GET", "/api/workers/stream", app=app)
    request._match_info = await app.router.resolve(request)
    assert route_label(request) == "/api/workers/stream"
    with pytest.raises(asyncio.CancelledError):
        await middleware(request, stream)
    assert http_count(metrics, "GET", "/api/workers/stream", "499") == 1
