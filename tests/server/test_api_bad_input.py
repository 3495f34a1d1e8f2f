"""Bad input on every endpoint that reads a body or a query: malformed JSON, wrong types,
missing fields, oversized bodies, unknown ids. Each answer is a 4xx with a one-line
``detail``, never a 500, and nothing changes in the fleet or the queue."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.server.protocol import WorkerClient

ONE_MIB = 1024 * 1024


@dataclass
class Busy:
    """A fleet in a known state: one worker running a job, one job pending."""

    server: Any
    worker: WorkerClient
    running: str
    pending: str

    def path(self, template: str) -> str:
        return template.format(running=self.running, pending=self.pending, w=self.worker.worker_id)

    def headers(self, kind: str) -> dict[str, str]:
        return self.worker.headers if kind == "worker" else self.server.admin


@pytest.fixture
async def busy(server: Any) -> AsyncIterator[Busy]:
    worker = await server.connected_worker(labels={"gpu_type": "a100"})
    running = await server.running_job(worker, config_name="tiny")
    pending = (await server.submit(target="worker"))["job_id"]
    # Move the clock, so an accepted heartbeat or registration would show in the fingerprint.
    await server.clock.advance(5)
    yield Busy(server, worker, running, pending)
    worker.close()


async def fingerprint(server: Any) -> str:
    """Everything a bad request must leave alone (the audit log aside: it records refusals)."""
    workers = await server.ok("GET", "/api/admin/workers")
    jobs = await server.ok("GET", "/api/queue")
    details = [await server.job(j["job_id"]) for j in jobs["jobs"]]
    logs = [await server.ok("GET", f"/api/queue/{j['job_id']}/logs") for j in jobs["jobs"]]
    tokens = await server.ok("GET", "/api/admin/tokens")
    return json.dumps([workers, details, logs, tokens], sort_keys=True)


async def assert_refused(resp: Any, *statuses: int, case: str = "") -> str:
    text = await resp.text()
    assert resp.status in (statuses or (400,)), f"{case}: {resp.status}: {text}"
    assert resp.status < 500
    body = json.loads(text)
    assert list(body) == ["detail"], body
    detail = body["detail"]
    assert isinstance(detail, str) and detail.strip() and "\n" not in detail
    assert "Traceback" not in detail
    return str(detail)


# (kind of token, method, path template, body size limit)
BODY_ENDPOINTS = [
    ("worker", "POST", "/api/workers/register", ONE_MIB),
    ("worker", "POST", "/api/workers/heartbeat", ONE_MIB),
    ("worker", "POST", "/api/workers/job/{running}/status", ONE_MIB),
    ("worker", "POST", "/api/workers/job/{running}/logs", 10 * ONE_MIB),
    ("worker", "POST", "/api/workers/disconnect", ONE_MIB),
    ("api", "POST", "/api/admin/workers", ONE_MIB),
    ("api", "POST", "/api/admin/tokens", ONE_MIB),
    ("api", "POST", "/api/queue/submit", ONE_MIB),
    ("api", "POST", "/api/queue/{pending}/cancel", ONE_MIB),
]
ENDPOINT_IDS = [f"{m} {p}" for _, m, p, _ in BODY_ENDPOINTS]

MALFORMED = [
    ("truncated", b'{"name": '),
    ("single-quotes", b"{'name': 'x'}"),
    ("trailing-comma", b'{"name": "x",}'),
    ("array", b"[1, 2]"),
    ("string", b'"just a string"'),
    ("null", b"null"),
    ("number", b"42"),
    ("nan", b'{"name": "x", "n": NaN}'),
    ("not-utf8", b'{"name": "\xff\xfe"}'),
    ("lone-surrogate", b'{"name": "\\ud800"}'),
    ("too-deep", b'{"a": ' * 40 + b"1" + b"}" * 40),
    ("huge-number", b'{"name": 1' + b"0" * 5000 + b"}"),
]


@pytest.mark.parametrize(("kind", "method", "template", "limit"), BODY_ENDPOINTS, ids=ENDPOINT_IDS)
async def test_malformed_json_is_400_and_changes_nothing(
    busy: Busy, kind: str, method: str, template: str, limit: int
) -> None:
    before = await fingerprint(busy.server)
    for name, raw in MALFORMED:
        resp = await busy.server.client.request(
            method, busy.path(template), data=raw, headers=busy.headers(kind)
        )
        detail = await assert_refused(resp, case=name)
        assert "JSON" in detail or "must be" in detail, name
    # A refused request that changed something leaves it changed: one check at the end.
    assert await fingerprint(busy.server) == before


@pytest.mark.parametrize(("kind", "method", "template", "limit"), BODY_ENDPOINTS, ids=ENDPOINT_IDS)
async def test_oversized_body_is_413_and_changes_nothing(
    busy: Busy, kind: str, method: str, template: str, limit: int
) -> None:
    before = await fingerprint(busy.server)
    filler = "x" * (limit + 1)
    raw = json.dumps({"name": "w", "config_name": "tiny", "status": "running", "pad": filler})
    resp = await busy.server.client.request(
        method, busy.path(template), data=raw.encode(), headers=busy.headers(kind)
    )
    detail = await assert_refused(resp, 413)
    assert detail.startswith("request body over")
    assert await fingerprint(busy.server) == before


async def test_oversized_chunked_body_is_413(busy: Busy) -> None:
    """No Content-Length: the limit still holds while reading."""

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"config_name": "tiny", "pad": "'
        for _ in range(17):
            yield b"x" * 65536
        yield b'"}'

    before = await fingerprint(busy.server)
    resp = await busy.server.client.post(
        "/api/queue/submit", data=chunks(), headers=busy.server.admin
    )
    assert await assert_refused(resp, 413) == "request body over 1 MiB; send less"
    assert await fingerprint(busy.server) == before


# Bodies that parse as JSON objects but do not fit: wrong types, missing fields, bad values.
BAD_BODIES = [
    ("worker", "/api/workers/register", {}),
    ("worker", "/api/workers/register", {"name": ""}),
    ("worker", "/api/workers/register", {"name": 7}),
    ("worker", "/api/workers/register", {"name": "x", "gpu_info": {"count": -1}}),
    ("worker", "/api/workers/register", {"name": "x", "gpu_info": "A100"}),
    ("worker", "/api/workers/register", {"name": "x", "gpu_count": "two"}),
    ("worker", "/api/workers/register", {"name": "x", "labels": ["a"]}),
    ("worker", "/api/workers/register", {"name": "x", "labels": {"": "a"}}),
    ("worker", "/api/workers/register", {"name": "x", "persistent": "sometimes"}),
    ("worker", "/api/workers/register", {"name": "x", "current_job_id": "j 1"}),
    ("worker", "/api/workers/register", {"name": "line\nbreak"}),
    ("worker", "/api/workers/heartbeat", {"gpu_utilization": "hot"}),
    ("worker", "/api/workers/heartbeat", {"gpu_utilization": [-1]}),
    ("worker", "/api/workers/heartbeat", {"vram_used_gb": [True, "x"]}),
    ("worker", "/api/workers/heartbeat", {"job_progress": [1, 2]}),
    ("worker", "/api/workers/heartbeat", {"status": {"s": 1}}),
    ("worker", "/api/workers/heartbeat", {"worker_id": 12}),
    ("worker", "/api/workers/job/{running}/status", {}),
    ("worker", "/api/workers/job/{running}/status", {"status": "exploded"}),
    ("worker", "/api/workers/job/{running}/status", {"status": None}),
    ("worker", "/api/workers/job/{running}/status", {"status": "completed", "progress": "half"}),
    ("worker", "/api/workers/job/{running}/status", {"status": "completed", "attempt": 0}),
    ("worker", "/api/workers/job/{running}/status", {"status": "failed", "error": ["x"]}),
    ("worker", "/api/workers/job/{running}/logs", {}),
    ("worker", "/api/workers/job/{running}/logs", {"lines": "hello"}),
    ("worker", "/api/workers/job/{running}/logs", {"lines": [{"seq": 0}]}),
    (
        "worker",
        "/api/workers/job/{running}/logs",
        {"lines": [{"seq": -1, "stream": "stdout", "line": "x", "at": 1.0}]},
    ),
    (
        "worker",
        "/api/workers/job/{running}/logs",
        {"lines": [{"seq": 0, "stream": "stdin", "line": "x", "at": 1.0}]},
    ),
    (
        "worker",
        "/api/workers/job/{running}/logs",
        {"lines": [{"seq": i, "stream": "stdout", "line": "x", "at": 1.0} for i in range(1001)]},
    ),
    ("worker", "/api/workers/disconnect", {"worker_id": 12}),
    ("worker", "/api/workers/disconnect", {"worker_id": ["w"]}),
    ("worker", "/api/workers/disconnect", {"worker_id": "w_other"}),
    ("api", "/api/admin/workers", {}),
    ("api", "/api/admin/workers", {"name": "has space"}),
    ("api", "/api/admin/workers", {"name": "x" * 65}),
    ("api", "/api/admin/workers", {"name": "x", "worker_type": "spot"}),
    ("api", "/api/admin/workers", {"name": "x", "labels": "gpu=a100"}),
    ("api", "/api/admin/workers", {"name": "x", "labels": {"-bad": "a"}}),
    ("api", "/api/admin/workers", {"name": "x", "labels": {f"k{i}": "v" for i in range(65)}}),
    ("api", "/api/queue/submit", {}),
    ("api", "/api/queue/submit", {"config_name": "../etc/passwd"}),
    ("api", "/api/queue/submit", {"config_name": "/abs"}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "config": {"a": 1}}),
    ("api", "/api/queue/submit", {"config": "model_type=lora"}),
    ("api", "/api/queue/submit", {"config_name": 5}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "target": "moon"}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "gpu_count": -1}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "gpu_count": 1.5}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "priority": "high"}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "priority": 1000}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "max_retries": -1}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "timeout_minutes": 0}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "min_vram_gb": "lots"}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "worker_labels": ["a100"]}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "env": {"1BAD": "x"}}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "env": ["A=1"]}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "command": []}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "command": "python 'unbalanced"}),
    ("api", "/api/queue/submit", {"config_name": "tiny", "dataloader": "pics"}),
    ("api", "/api/queue/{pending}/cancel", {"reason": ["x"]}),
    ("api", "/api/queue/{pending}/cancel", {"reason": "x" * 300}),
]


BAD_BODY_TEMPLATES = sorted({t for _, t, _ in BAD_BODIES})


@pytest.mark.parametrize("template", BAD_BODY_TEMPLATES)
async def test_bodies_that_do_not_fit_are_400_and_change_nothing(busy: Busy, template: str) -> None:
    before = await fingerprint(busy.server)
    cases = [(kind, body) for kind, t, body in BAD_BODIES if t == template]
    for kind, body in cases:
        resp = await busy.server.client.post(
            busy.path(template), json=body, headers=busy.headers(kind)
        )
        await assert_refused(resp, case=str(body)[:200])
    assert await fingerprint(busy.server) == before


async def test_a_missing_field_is_named(busy: Busy) -> None:
    resp = await busy.worker.post("/api/workers/register", {"gpu_count": 1})
    assert await assert_refused(resp) == "name: required"
    resp = await busy.worker.post(f"/api/workers/job/{busy.running}/status", {})
    assert "status" in await assert_refused(resp)


async def test_an_empty_body_where_fields_are_required_says_what_to_send(busy: Busy) -> None:
    resp = await busy.server.client.post(
        "/api/workers/register", data=b"", headers=busy.worker.headers
    )
    assert await assert_refused(resp) == "empty request body; send a JSON object with name"


BAD_QUERIES = [
    ("api", "/api/admin/workers?status=sleeping"),
    ("api", "/api/queue?status=nope"),
    ("api", "/api/queue?limit=-5"),
    ("api", "/api/queue?offset=x"),
    ("api", "/api/queue?worker_id=w%20x"),
    ("api", "/api/queue/{running}/logs?from_seq=-1"),
    ("api", "/api/queue/{running}/logs?limit=0"),
    ("api", "/api/queue/{running}/logs?stream=stdin"),
    ("api", "/api/queue/{running}/logs?attempt=0"),
    ("api", "/api/queue/{running}/logs?follow=maybe"),
    ("api", "/api/audit?since=tomorrow"),
    ("api", "/api/audit?limit=100000"),
    ("worker", "/api/workers/queue?worker_id=w%0Ax"),
    ("worker", "/api/workers/stream?worker_id=" + "w" * 200),
]


async def test_bad_query_parameters_are_400(busy: Busy) -> None:
    before = await fingerprint(busy.server)
    for kind, template in BAD_QUERIES:
        resp = await busy.server.client.get(busy.path(template), headers=busy.headers(kind))
        await assert_refused(resp, case=template)
    assert await fingerprint(busy.server) == before


UNKNOWN_IDS = [
    ("api", "GET", "/api/admin/workers/w_unknown", 404),
    ("api", "POST", "/api/admin/workers/w_unknown/drain", 404),
    ("api", "POST", "/api/admin/workers/w_unknown/resume", 404),
    ("api", "POST", "/api/admin/workers/w_unknown/token", 404),
    ("api", "DELETE", "/api/admin/workers/w_unknown", 404),
    ("api", "DELETE", "/api/admin/tokens/4242", 404),
    ("api", "GET", "/api/queue/j_unknown", 404),
    ("api", "GET", "/api/queue/j_unknown/logs", 404),
    ("api", "GET", "/api/queue/position/j_unknown", 404),
    ("api", "POST", "/api/queue/j_unknown/cancel", 404),
    ("worker", "POST", "/api/workers/job/j_unknown/status", 404),
    ("worker", "POST", "/api/workers/job/j_unknown/logs", 404),
    ("worker", "GET", "/api/workers/stream?worker_id=w_unknown", 400),
    ("api", "GET", "/api/nothing-here", 404),
    ("api", "PUT", "/api/queue/submit", 405),
]


async def test_unknown_ids_and_urls(busy: Busy) -> None:
    before = await fingerprint(busy.server)
    body: dict[str, Any] = {"status": "completed", "lines": []}
    for kind, method, path, status in UNKNOWN_IDS:
        resp = await busy.server.client.request(method, path, json=body, headers=busy.headers(kind))
        await assert_refused(resp, status, case=f"{method} {path}")
    assert await fingerprint(busy.server) == before


async def test_bad_input_never_reaches_a_500_in_the_metrics(busy: Busy) -> None:
    """After a burst of junk, no request was answered with a 5xx."""
    for _, method, template, _limit in BODY_ENDPOINTS:
        for raw in (b"{", b"[]", b'{"x": 1}', b"\x00\x01"):
            await busy.server.client.request(
                method, busy.path(template), data=raw, headers=busy.headers("worker")
            )
            await busy.server.client.request(
                method, busy.path(template), data=raw, headers=busy.server.admin
            )
    text = await (await busy.server.client.get("/metrics")).text()
    assert 'status="5' not in text
