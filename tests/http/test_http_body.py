"""parse_body / parse_query: JSON whatever the Content-Type, size limits, one-line 400s."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import TestClient, make_mocked_request
from multidict import MultiDict
from pydantic import BaseModel, Field

from tunefleet.http.body import (
    DEFAULT_MAX_BODY_BYTES,
    MAX_JSON_DEPTH,
    decode_json,
    format_loc,
    human_size,
    parse_body,
    parse_json_bytes,
    parse_query,
    parse_query_mapping,
    read_body,
)
from tunefleet.http.errors import ApiError, error_middleware
from tunefleet.http.schemas import (
    CreateWorkerRequest,
    DeleteWorkerQuery,
    JobListQuery,
    JobLogsRequest,
    SubmitJobRequest,
)

ClientMaker = Callable[[web.Application], Awaitable[TestClient]]


class Sized(BaseModel):
    name: str = Field(max_length=10)
    gpu_count: int = Field(default=1, ge=0)


class AllOptional(BaseModel):
    reason: str | None = None
    force: bool = False


def build_app() -> web.Application:
    app = web.Application(middlewares=[error_middleware])
    routes = web.RouteTableDef()

    @routes.post("/sized")
    async def sized(request: web.Request) -> web.Response:
        body = await parse_body(request, Sized)
        again = await parse_body(request, Sized)  # the body is kept: a second read works
        assert again == body
        return web.json_response(body.model_dump())

    @routes.post("/small")
    async def small(request: web.Request) -> web.Response:
        body = await parse_body(request, AllOptional, max_bytes=1024)
        return web.json_response(body.model_dump())

    @routes.post("/optional")
    async def optional(request: web.Request) -> web.Response:
        body = await parse_body(request, AllOptional)
        return web.json_response(body.model_dump())

    @routes.get("/jobs")
    async def jobs(request: web.Request) -> web.Response:
        query = parse_query(request, JobListQuery)
        return web.json_response(query.model_dump())

    app.add_routes(routes)
    return app


@pytest.fixture
async def client(aiohttp_client: ClientMaker) -> TestClient:
    return await aiohttp_client(build_app())


async def detail_of(response: object) -> str:
    body = await response.json()  # type: ignore[attr-defined]
    assert set(body) == {"detail"}
    assert "\n" not in body["detail"]
    return str(body["detail"])


# --- Content-Type does not matter ------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [None, "application/json", "text/plain", "application/x-www-form-urlencoded"],
)
async def test_json_is_read_whatever_the_content_type(
    client: TestClient, content_type: str | None
) -> None:
    # curl -d sends application/x-www-form-urlencoded; the seed's examples rely on it.
    headers = {"Content-Type": content_type} if content_type else {}
    data = b'{"name": "w1", "gpu_count": 2}'
    response = await client.post("/sized", data=data, headers=headers)
    assert response.status == 200, await response.text()
    assert (await response.json()) == {"name": "w1", "gpu_count": 2}


async def test_utf8_with_bom_is_read(client: TestClient) -> None:
    response = await client.post("/sized", data=b'\xef\xbb\xbf{"name": "w\xc3\xa9"}')
    assert response.status == 200
    assert (await response.json())["name"] == "wé"


# --- size ------------------------------------------------------------------------------


async def test_declared_length_over_the_limit_is_413(client: TestClient) -> None:
    big = json.dumps({"name": "x", "pad": "y" * DEFAULT_MAX_BODY_BYTES}).encode()
    response = await client.post("/sized", data=big)
    assert response.status == 413
    assert await detail_of(response) == "request body over 1 MiB; send less"


async def test_chunked_body_over_the_limit_is_413(client: TestClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"reason": "'
        for _ in range(3):
            yield b"z" * 600
        yield b'"}'

    response = await client.post("/small", data=chunks())
    assert response.status == 413
    assert await detail_of(response) == "request body over 1 KiB; send less"


async def test_body_exactly_at_the_limit_is_read(client: TestClient) -> None:
    prefix, suffix = b'{"reason": "', b'"}'
    data = prefix + b"a" * (1024 - len(prefix) - len(suffix)) + suffix
    assert len(data) == 1024
    response = await client.post("/small", data=data)
    assert response.status == 200


async def test_chunked_body_under_the_limit_is_read_whole(client: TestClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for part in (b'{"name": ', b'"w1", "gpu', b'_count": 3}'):
            yield part

    response = await client.post("/sized", data=chunks())
    assert response.status == 200
    assert (await response.json()) == {"name": "w1", "gpu_count": 3}


async def test_a_body_shorter_than_its_declared_length_is_400_not_500() -> None:
    payload = StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())
    payload.feed_data(b'{"name": ')
    payload.feed_eof()
    request = make_mocked_request(
        "POST", "/sized", headers={"Content-Length": "30"}, payload=payload
    )
    assert await read_body(request) == b'{"name": '
    with pytest.raises(ApiError, match="malformed JSON") as caught:
        await parse_body(request, Sized)
    assert caught.value.status == 400


def test_human_size() -> None:
    assert human_size(1024 * 1024) == "1 MiB"
    assert human_size(64 * 1024) == "64 KiB"
    assert human_size(1000) == "1000 bytes"
    assert human_size(3 * 1024 * 1024) == "3 MiB"


# --- empty, malformed, not an object ---------------------------------------------------


async def test_empty_body_gives_defaults_when_nothing_is_required(client: TestClient) -> None:
    response = await client.post("/optional")
    assert response.status == 200
    assert (await response.json()) == {"reason": None, "force": False}
    response = await client.post("/optional", data=b"  \n ")
    assert response.status == 200


async def test_empty_body_names_the_required_fields(client: TestClient) -> None:
    response = await client.post("/sized")
    assert response.status == 400
    assert await detail_of(response) == "empty request body; send a JSON object with name"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{bad", "Expecting property name enclosed in double quotes at line 1 column 2"),
        (b'{"a": 1,}', "Expecting property name enclosed in double quotes at line 1 column 9"),
        (b'{"name": "x"} trailing', "Extra data at line 1 column 15"),
        (b'{"name": NaN}', "NaN is not valid JSON"),
        (b'{"name": -Infinity}', "-Infinity is not valid JSON"),
        (b'{"name": "\\ud800"}', "a string holds an unpaired surrogate escape (\\ud800-\\udfff)"),
        (b"\xff\xfe\xfa", "not UTF-8 text"),
        (b'{"n": 1' + b"1" * 5000 + b"}", "a number with more digits than allowed (4300)"),
        (b"[" * 50 + b"]" * 50, f"nested deeper than {MAX_JSON_DEPTH} levels"),
        (b"[" * 100_000 + b"]" * 100_000, f"nested deeper than {MAX_JSON_DEPTH} levels"),
    ],
)
def test_malformed_json_is_400_with_a_short_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_json_bytes(raw, Sized)
    assert caught.value.status == 400
    assert caught.value.detail == f"malformed JSON: {reason}; send a JSON object"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"name": "\\uD83D"}',  # upper-case hex
        b'{"name": "\xed\xa0\x80"}',  # a surrogate written as UTF-8 bytes
        '{"name": "\\udc00"}'.encode("utf-16-le"),  # an escape in a UTF-16 body
        '{"name": "\ud800"}'.encode("utf-16-be", "surrogatepass"),  # a lone code unit
    ],
)
def test_an_unpaired_surrogate_is_found_however_it_is_written(raw: bytes) -> None:
    with pytest.raises(ApiError) as caught:
        parse_json_bytes(raw, Sized)
    assert "unpaired surrogate" in caught.value.detail


def test_brackets_inside_strings_do_not_hide_real_nesting() -> None:
    deep = b'{"name": "' + b"[" * 40 + b'", "x": ' + b"[" * 33 + b"]" * 33 + b"}"
    with pytest.raises(ApiError, match="nested deeper"):
        parse_json_bytes(deep, Sized)
    # Brackets in strings alone are text, not nesting.
    assert decode_json(b'{"name": "' + b"{[" * 40 + b'"}') == {"name": "{[" * 40}


def test_paired_surrogates_and_other_escapes_are_fine() -> None:
    assert parse_json_bytes(b'{"name": "\\ud83d\\ude00 \\u00e9"}', Sized).name == "\U0001f600 é"
    assert parse_json_bytes('{"name": "é"}'.encode("utf-16"), Sized).name == "é"


def test_nesting_up_to_the_limit_is_fine() -> None:
    class Anything(BaseModel):
        data: object = None

    nested: object = 1
    for _ in range(MAX_JSON_DEPTH - 1):
        nested = [nested]
    assert parse_json_bytes(json.dumps({"data": nested}).encode(), Anything).data == nested


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b"[]", "an array"),
        (b'"name"', "a string"),
        (b"3", "a number"),
        (b"1.5", "a number"),
        (b"null", "null"),
        (b"true", "a boolean"),
    ],
)
def test_a_body_that_is_not_an_object_is_400(raw: bytes, kind: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_json_bytes(raw, AllOptional)
    assert caught.value.status == 400
    assert caught.value.detail == f"request body must be a JSON object, not {kind}; send {{...}}"


# --- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({}, "name: required"),
        ({"name": 5}, "name: must be a string"),
        ({"name": "x" * 11}, "name: must be at most 10 characters"),
        ({"name": "x", "gpu_count": -1}, "gpu_count: must be ≥ 0"),
        ({"name": "x", "gpu_count": "two"}, "gpu_count: must be an integer"),
        ({"name": "x", "gpu_count": 1.5}, "gpu_count: must be a whole number"),
        ({"gpu_count": -1}, "name: required (and 1 more problem)"),
        ({"name": None, "gpu_count": None}, "name: must be a string (and 1 more problem)"),
    ],
)
def test_validation_errors_name_the_field(body: dict[str, object], detail: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_json_bytes(json.dumps(body).encode(), Sized)
    assert (caught.value.status, caught.value.detail) == (400, detail)


@pytest.mark.parametrize(
    ("model", "body", "detail"),
    [
        (
            CreateWorkerRequest,
            {"name": "w", "labelz": {}},
            "unknown field 'labelz' (did you mean 'labels'?)",
        ),
        (
            CreateWorkerRequest,
            {"name": "w", "worker_type": "spot"},
            "worker_type: must be 'persistent' or 'ephemeral'",
        ),
        (
            JobLogsRequest,
            {
                "lines": [
                    {"seq": 1, "stream": "stdout", "line": "x", "at": 1},
                    {"seq": 2, "stream": "stdin", "line": "x", "at": 1},
                ]
            },
            "lines[1].stream: must be 'stdout' or 'stderr'",
        ),
        (JobLogsRequest, {"lines": {}}, "lines: must be a list"),
        (
            SubmitJobRequest,
            {"config_name": "x", "worker_labels": []},
            "worker_labels: must be a JSON object",
        ),
        (
            SubmitJobRequest,
            {"config_name": "x", "command": []},
            "command: must have at least 1 item",
        ),
        (SubmitJobRequest, {"config_name": "x", "priority": 101}, "priority: must be ≤ 100"),
        (
            SubmitJobRequest,
            {"config_name": "x", "timeout_minutes": 0},
            "timeout_minutes: must be > 0",
        ),
        (
            SubmitJobRequest,
            {"config_name": "x", "env": {"A": "x" * 40000}},
            "env.A: must be at most 32768 characters",
        ),
    ],
)
def test_validation_errors_of_real_models(
    model: type[BaseModel], body: dict[str, object], detail: str
) -> None:
    with pytest.raises(ApiError) as caught:
        parse_json_bytes(json.dumps(body).encode(), model)
    assert (caught.value.status, caught.value.detail) == (400, detail)


async def test_validation_error_over_http(client: TestClient) -> None:
    response = await client.post("/sized", json={"name": "x", "gpu_count": -3})
    assert response.status == 400
    assert await detail_of(response) == "gpu_count: must be ≥ 0"


def test_format_loc() -> None:
    assert format_loc(("lines", 3, "line")) == "lines[3].line"
    assert format_loc(("labels", "gpu_type")) == "labels.gpu_type"
    assert format_loc(("labels", "bad key", "[key]")) == 'labels["bad key"] (key)'
    assert format_loc(()) == ""


# --- query strings ---------------------------------------------------------------------


async def test_query_parameters_are_parsed_and_validated(client: TestClient) -> None:
    response = await client.get("/jobs?status=pending,running&limit=10&ignored=1")
    assert response.status == 200
    body = await response.json()
    assert body["status"] == ["pending", "running"]
    assert (body["limit"], body["offset"]) == (10, 0)


async def test_repeated_query_parameter_is_a_list(client: TestClient) -> None:
    response = await client.get("/jobs?status=pending&status=failed")
    assert (await response.json())["status"] == ["pending", "failed"]


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        ("limit=501", "limit: must be ≤ 500"),
        ("limit=0", "limit: must be ≥ 1"),
        ("limit=ten", "limit: must be an integer"),
        ("limit=", "limit: must be an integer"),
        ("offset=-1", "offset: must be ≥ 0"),
        ("target=cloud", "target: must be 'worker', 'local' or 'auto'"),
        (
            "status=done",
            "status[0]: must be 'pending_approval', 'pending', 'dispatched', 'running', "
            "'completed', 'failed' or 'cancelled'",
        ),
    ],
)
async def test_bad_query_parameters_are_400(client: TestClient, query: str, detail: str) -> None:
    response = await client.get(f"/jobs?{query}")
    assert response.status == 400
    assert await detail_of(response) == detail


def test_query_booleans_read_like_people_write_them() -> None:
    for text, value in (("true", True), ("1", True), ("yes", True), ("false", False), ("0", False)):
        assert parse_query_mapping(MultiDict(force=text), DeleteWorkerQuery).force is value
    with pytest.raises(ApiError) as caught:
        parse_query_mapping({"force": "maybe"}, DeleteWorkerQuery)
    assert caught.value.detail == "force: must be true or false"


def test_query_from_a_plain_mapping() -> None:
    assert parse_query_mapping({"limit": "7"}, JobListQuery).limit == 7


def test_an_over_long_label_key_says_how_long_it_is_and_the_limit() -> None:
    key = "team" * 50  # 200 characters: the location shows it cut short
    body = json.dumps({"name": "w1", "labels": {key: "nlp"}}).encode()
    with pytest.raises(ApiError) as raised:
        parse_json_bytes(body, CreateWorkerRequest)
    detail = raised.value.detail
    assert detail == (
        f'labels["{key[:40]}…"] (key): is 200 characters long; must be at most 128 characters'
    )


def test_format_loc_cuts_long_keys_so_the_problem_still_fits() -> None:
    assert format_loc(("labels", "k" * 41)) == f'labels["{"k" * 40}…"]'
    assert format_loc(("labels", "k" * 40)) == f"labels.{'k' * 40}"
