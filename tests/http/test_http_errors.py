"""error_middleware: every failure is JSON {"detail": one line}, with a request id."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import TestClient, make_mocked_request

from tunefleet.errors import TunefleetError
from tunefleet.http.errors import (
    REQUEST_ID_HEADER,
    ApiError,
    error_middleware,
    error_response,
    new_request_id,
    one_line,
    request_id,
)

ClientMaker = Callable[[web.Application], Awaitable[TestClient]]


class JobGone(TunefleetError):
    status = 404


class Unready(TunefleetError):
    status = 503


class NoStatus(TunefleetError):
    """A deliberate error that never said what it means to a client."""

    status = 500


def build_app() -> web.Application:
    app = web.Application(middlewares=[error_middleware])
    routes = web.RouteTableDef()

    @routes.get("/ok")
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"request_id": request_id(request)})

    @routes.get("/api-error")
    async def api_error(request: web.Request) -> web.Response:
        raise ApiError(409, "worker w_1 is busy;\n drain it first", headers={"Retry-After": "5"})

    @routes.get("/custom-404")
    async def custom_404(request: web.Request) -> web.Response:
        raise web.HTTPNotFound(text="Job not found: j_1")

    @routes.get("/plain-403")
    async def plain_403(request: web.Request) -> web.Response:
        raise web.HTTPForbidden()

    @routes.get("/redirect")
    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound("/ok")

    @routes.get("/domain-404")
    async def domain_404(request: web.Request) -> web.Response:
        raise JobGone("Job not found: j_9")

    @routes.get("/domain-503")
    async def domain_503(request: web.Request) -> web.Response:
        raise Unready("orchestrator is starting; retry in a few seconds")

    @routes.get("/domain-500")
    async def domain_500(request: web.Request) -> web.Response:
        raise NoStatus("store invariant broken: secret-internal-state")

    @routes.get("/boom")
    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError("secret-internal-state")

    @routes.get("/stream")
    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"data: x\n\n")
        return response

    app.add_routes(routes)
    return app


@pytest.fixture
async def client(aiohttp_client: ClientMaker) -> TestClient:
    return await aiohttp_client(build_app())


async def test_success_carries_a_request_id_the_handler_can_read(client: TestClient) -> None:
    response = await client.get("/ok")
    assert response.status == 200
    rid = response.headers[REQUEST_ID_HEADER]
    assert re.fullmatch(r"[0-9a-f]{16}", rid)
    assert (await response.json()) == {"request_id": rid}


async def test_each_request_gets_its_own_id(client: TestClient) -> None:
    first = (await client.get("/ok")).headers[REQUEST_ID_HEADER]
    second = (await client.get("/ok")).headers[REQUEST_ID_HEADER]
    assert first != second


async def test_a_plain_incoming_request_id_is_kept(client: TestClient) -> None:
    response = await client.get("/ok", headers={REQUEST_ID_HEADER: "proxy-abc.123"})
    assert response.headers[REQUEST_ID_HEADER] == "proxy-abc.123"


async def test_an_unsafe_incoming_request_id_is_replaced(client: TestClient) -> None:
    response = await client.get("/ok", headers={REQUEST_ID_HEADER: "a b<script>"})
    assert response.headers[REQUEST_ID_HEADER] != "a b<script>"
    assert re.fullmatch(r"[0-9a-f]{16}", response.headers[REQUEST_ID_HEADER])


async def test_api_error_renders_status_one_line_detail_and_headers(client: TestClient) -> None:
    response = await client.get("/api-error")
    assert response.status == 409
    assert response.content_type == "application/json"
    assert (await response.json()) == {"detail": "worker w_1 is busy; drain it first"}
    assert response.headers["Retry-After"] == "5"
    assert REQUEST_ID_HEADER in response.headers


async def test_unknown_route_is_json_404(client: TestClient) -> None:
    response = await client.get("/api/nope")
    assert response.status == 404
    assert (await response.json()) == {"detail": "Not found: GET /api/nope"}
    assert REQUEST_ID_HEADER in response.headers


async def test_wrong_method_is_json_405_with_allow(client: TestClient) -> None:
    response = await client.delete("/ok")
    assert response.status == 405
    # aiohttp answers HEAD wherever GET is routed.
    assert (await response.json()) == {"detail": "Method DELETE not allowed on /ok; use GET, HEAD"}
    assert set(response.headers["Allow"].split(",")) == {"GET", "HEAD"}


async def test_http_exception_with_own_text_keeps_it(client: TestClient) -> None:
    response = await client.get("/custom-404")
    assert response.status == 404
    assert (await response.json()) == {"detail": "Job not found: j_1"}


async def test_http_exception_without_text_uses_reason(client: TestClient) -> None:
    response = await client.get("/plain-403")
    assert response.status == 403
    assert (await response.json()) == {"detail": "Forbidden"}


async def test_redirects_pass_through(client: TestClient) -> None:
    response = await client.get("/redirect", allow_redirects=False)
    assert response.status == 302
    assert response.headers["Location"] == "/ok"
    assert REQUEST_ID_HEADER in response.headers


async def test_domain_error_with_client_status_shows_its_message(client: TestClient) -> None:
    response = await client.get("/domain-404")
    assert response.status == 404
    assert (await response.json()) == {"detail": "Job not found: j_9"}
    response = await client.get("/domain-503")
    assert response.status == 503
    assert (await response.json())["detail"].startswith("orchestrator is starting")


async def test_domain_error_without_client_status_is_hidden(client: TestClient) -> None:
    with structlog.testing.capture_logs() as logs:
        response = await client.get("/domain-500")
    assert response.status == 500
    body = await response.text()
    assert "secret-internal-state" not in body
    assert any(e["event"] == "request_failed" for e in logs)


async def test_unexpected_exception_is_500_naming_only_the_request_id(client: TestClient) -> None:
    with structlog.testing.capture_logs() as logs:
        response = await client.get("/boom")
    assert response.status == 500
    rid = response.headers[REQUEST_ID_HEADER]
    body = await response.json()
    assert body == {"detail": f"internal error; see the orchestrator log (request id {rid})"}
    assert "secret-internal-state" not in await response.text()
    failures = [e for e in logs if e["event"] == "request_failed"]
    assert len(failures) == 1
    assert failures[0]["exc_info"] is True
    assert failures[0]["path"] == "/boom"
    assert failures[0]["log_level"] == "error"


async def test_a_streamed_response_is_left_alone(client: TestClient) -> None:
    response = await client.get("/stream")
    assert response.status == 200
    assert (await response.read()) == b"data: x\n\n"


async def test_cancellation_is_not_turned_into_a_response() -> None:
    request = make_mocked_request("GET", "/x")

    async def cancelled(_: web.Request) -> web.StreamResponse:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await error_middleware(request, cancelled)


def test_api_error_keeps_status_detail_and_is_a_tunefleet_error() -> None:
    error = ApiError(422, "x")
    assert isinstance(error, TunefleetError)
    assert (error.status, error.detail, error.headers, str(error)) == (422, "x", {}, "x")
    assert repr(error) == "ApiError(422, 'x')"


def test_one_line_collapses_whitespace_and_cuts_long_text() -> None:
    assert one_line("a\n\tb\r\n  c ") == "a b c"
    cut = one_line("x" * 1000)
    assert len(cut) == 300
    assert cut.endswith("…")


def test_error_response_body_and_headers() -> None:
    response = error_response(418, "teapot\nhere", {"X-Extra": "1"})
    assert response.status == 418
    assert response.text == '{"detail": "teapot here"}'
    assert response.headers["X-Extra"] == "1"


def test_request_id_outside_the_middleware_is_a_dash() -> None:
    assert request_id(make_mocked_request("GET", "/")) == "-"


async def test_log_lines_of_a_request_carry_its_id(client: TestClient) -> None:
    merge = structlog.contextvars.merge_contextvars
    with structlog.testing.capture_logs(processors=[merge]) as logs:
        response = await client.get("/boom", headers={REQUEST_ID_HEADER: "trace-7"})
    assert response.headers[REQUEST_ID_HEADER] == "trace-7"
    failures = [e for e in logs if e["event"] == "request_failed"]
    assert [e["request_id"] for e in failures] == ["trace-7"]


@pytest.mark.parametrize("outcome", ["ok", "error"])
async def test_the_request_id_binding_ends_with_the_request(outcome: str) -> None:
    """What was bound before (an outer request, a task's own context) comes back."""
    seen: list[object] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(structlog.contextvars.get_contextvars().get("request_id"))
        if outcome == "error":
            raise ApiError(409, "no")
        return web.Response()

    request = make_mocked_request("GET", "/x", headers={REQUEST_ID_HEADER: "inner"})
    with structlog.contextvars.bound_contextvars(request_id="outer"):
        response = await error_middleware(request, handler)
        assert structlog.contextvars.get_contextvars()["request_id"] == "outer"
    assert "request_id" not in structlog.contextvars.get_contextvars()
    assert seen == ["inner"]
    assert response.headers[REQUEST_ID_HEADER] == "inner"


async def test_a_blank_incoming_request_id_is_replaced(client: TestClient) -> None:
    response = await client.get("/ok", headers={REQUEST_ID_HEADER: "   "})
    assert re.fullmatch(r"[0-9a-f]{16}", response.headers[REQUEST_ID_HEADER])


def test_generated_request_ids_are_16_hex_digits_and_do_not_repeat() -> None:
    ids = {new_request_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(re.fullmatch(r"[0-9a-f]{16}", rid) for rid in ids)
