"""Failed sign-ins per client address (issue 23, finding 5).

Before, one client could try API tokens, worker tokens and upload tokens as fast as the
server answered, and each wrong one was an audit row and a JSON line. Now an address gets
``--auth-failures-per-window`` (20) a window (60 s); past it 429 with Retry-After, before
any lookup, for every credential that has not authenticated lately. The audit holds each
window's first failure of each kind and one summary of the rest.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.server.protocol import eventually
from tunefleet.http.auth import API_UNAUTHORIZED, WORKER_UNAUTHORIZED
from tunefleet.http.tokens import new_api_token, new_worker_token
from tunefleet.limits import Limits

BUDGET = Limits().auth_failures_per_window
WINDOW_S = Limits().auth_failure_window_s


@pytest.fixture
async def neighbour(server: Any) -> AsyncIterator[aiohttp.ClientSession]:
    """A client on another loopback address (127.0.0.2): another address to the server."""
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    session = aiohttp.ClientSession(str(server.client.make_url("")), connector=connector)
    try:
        yield session
    finally:
        await session.close()


async def _guess_api(server: Any, count: int) -> list[int]:
    statuses = []
    for _ in range(count):
        resp = await server.client.get("/api/queue", headers=server.bearer(new_api_token()))
        statuses.append(resp.status)
        if resp.status == 429:
            data = await resp.json()
            assert data["detail"].startswith("too many failed sign-ins from this address")
            assert resp.headers["Retry-After"] == str(int(WINDOW_S))
    return statuses


def _audit_lines(server: Any) -> list[dict[str, Any]]:
    path = server.data_dir / "audit.jsonl"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return [json.loads(line) for line in text.splitlines()]


async def test_wrong_api_tokens_past_the_budget_get_429_and_good_clients_do_not(
    server: Any, neighbour: aiohttp.ClientSession
) -> None:
    ci = server.bearer(await server.api_token("queue.submit", name="ci"))
    assert (await server.client.get("/api/queue", headers=ci)).status == 200

    statuses = await _guess_api(server, 100)

    assert statuses == [401] * BUDGET + [429] * (100 - BUDGET)
    # The good token from the same address (a NAT) still works; so does the admin's.
    assert (await server.client.get("/api/queue", headers=ci)).status == 200
    assert (await server.get("/api/queue")).status == 200
    # Another address is untouched: its own wrong token is a plain 401.
    async with neighbour.get("/api/queue", headers=server.bearer(new_api_token())) as resp:
        assert (resp.status, (await resp.json())["detail"]) == (401, API_UNAUTHORIZED)


async def test_throttled_guesses_are_not_looked_up(server: Any) -> None:
    await _guess_api(server, BUDGET)
    lookups = 0
    original = server.store.api_token_by_hash

    async def counted(token_hash: str) -> Any:
        nonlocal lookups
        lookups += 1
        return await original(token_hash)

    server.store.api_token_by_hash = counted
    assert await _guess_api(server, 10) == [429] * 10
    assert lookups == 0


async def test_concurrent_guesses_cannot_overshoot_the_budget(server: Any) -> None:
    """Lookups under way count against the budget: before, 60 guesses sent at once after a
    first failure were all looked up (and all 401) because none had failed yet."""
    assert await _guess_api(server, 1) == [401]  # the address's window is open
    original = server.store.api_token_by_hash

    async def slow(token_hash: str) -> Any:
        await asyncio.sleep(0.05)  # every guess is in flight at once
        return await original(token_hash)

    server.store.api_token_by_hash = slow
    statuses = await asyncio.gather(
        *(
            server.client.get("/api/queue", headers=server.bearer(new_api_token()))
            for _ in range(60)
        )
    )
    codes = sorted(resp.status for resp in statuses)
    assert codes == [401] * (BUDGET - 1) + [429] * (60 - BUDGET + 1)


async def test_a_valid_token_not_seen_lately_waits_like_a_guess(server: Any) -> None:
    """While its address is throttled a token passes only once it has authenticated:
    telling a fresh good token from a guess would take the lookup the throttle saves."""
    fresh = server.bearer(await server.api_token("queue.submit", name="fresh"))
    await _guess_api(server, BUDGET)
    assert (await server.client.get("/api/queue", headers=fresh)).status == 429
    await server.clock.advance(WINDOW_S)
    assert (await server.client.get("/api/queue", headers=fresh)).status == 200


async def test_every_refusal_is_counted_in_the_metrics(server: Any) -> None:
    await _guess_api(server, BUDGET + 7)
    text = await (await server.client.get("/metrics")).text()
    assert f'tunefleet_auth_failures_total{{kind="api"}} {BUDGET + 7}.0' in text


async def test_the_address_may_try_again_once_its_window_has_passed(server: Any) -> None:
    await _guess_api(server, BUDGET + 1)
    await server.clock.advance(WINDOW_S / 2)
    resp = await server.client.get("/api/queue", headers=server.bearer(new_api_token()))
    assert (resp.status, resp.headers["Retry-After"]) == (429, str(int(WINDOW_S / 2)))
    await server.clock.advance(WINDOW_S / 2)
    assert await _guess_api(server, 1) == [401]


async def test_a_hundred_guesses_are_one_record_and_one_summary(server: Any) -> None:
    before = len(_audit_lines(server))
    await _guess_api(server, 100)
    await server.clock.advance(WINDOW_S)  # the window closes: its summary is written
    await server.settle()

    denied = sorted(await server.audit(outcome="denied"), key=lambda e: e["id"])
    assert [e["kind"] for e in denied] == ["auth.failed", "auth.failed_window"]
    first, summary = denied
    assert (first["target"], first["detail"]["reason"]) == (
        "GET /api/queue",
        "unknown or revoked API token",
    )
    assert summary["client_address"] == "127.0.0.1"
    detail = summary["detail"]
    assert (detail["attempts"], detail["refused"], detail["throttled"]) == (100, BUDGET, 80)
    assert detail["recorded_individually"] == 1
    assert detail["credentials"] == ["api"]
    assert detail["reasons"] == ["unknown or revoked API token"]
    assert detail["targets"] == ["GET /api/queue"]
    assert detail["window_s"] == WINDOW_S
    assert detail["first_at"] <= detail["last_at"]

    # Two lines in audit.jsonl, not a hundred (the file is written on a thread of its own).
    async def written() -> list[dict[str, Any]] | None:
        lines = _audit_lines(server)[before:]
        return lines if any(line["kind"] == "auth.failed_window" for line in lines) else None

    lines = await eventually(written, "the summary's line in audit.jsonl")
    assert [line["kind"] for line in lines] == ["auth.failed", "auth.failed_window"]


async def test_an_open_window_is_summed_up_at_shutdown(make_server: Any) -> None:
    server = await make_server()
    await _guess_api(server, 30)
    await server.client.close()
    kinds = [line["kind"] for line in _audit_lines(server)]
    assert kinds.count("auth.failed") == 1
    (summary,) = [line for line in _audit_lines(server) if line["kind"] == "auth.failed_window"]
    assert summary["detail"]["attempts"] == 30
    assert summary["id"] is not None  # stored in the table too, before the database closed


async def test_wrong_worker_tokens_are_throttled_and_a_connected_worker_is_not(
    server: Any,
) -> None:
    worker = await server.connected_worker("gpu-1")
    statuses = []
    for _ in range(BUDGET + 5):
        resp = await server.client.post(
            "/api/workers/register",
            json={"name": "intruder"},
            headers={"X-Worker-Token": new_worker_token()},
        )
        statuses.append(resp.status)
    assert statuses == [401] * BUDGET + [429] * 5
    assert "Retry-After" in resp.headers
    # The worker on the same address keeps its place: heartbeats and its stream work,
    # and so does a worker whose token has not been used since the server started
    # (worker tokens are resolved in memory, so even a throttled address's are).
    assert (await worker.heartbeat()).status == 200
    resp = await worker.post("/api/workers/register", {"name": "gpu-1"})
    assert resp.status == 200
    newcomer = await server.create_worker("gpu-2")
    resp = await newcomer.post("/api/workers/register", {"name": "gpu-2"})
    assert resp.status == 200
    registered = await server.audit(kind="worker.register_failed")
    assert len(registered) == 1
    worker.close()


async def test_missing_worker_tokens_count_too(server: Any) -> None:
    statuses = []
    for _ in range(BUDGET + 1):
        resp = await server.client.post("/api/workers/heartbeat", json={"worker_id": "w_x"})
        statuses.append(resp.status)
    assert statuses == [401] * BUDGET + [429]
    body = await resp.json()
    assert body["detail"] != WORKER_UNAUTHORIZED


async def test_wrong_upload_tokens_are_throttled(server: Any) -> None:
    await server.get("/api/queue")  # the admin's token has authenticated: it passes later
    statuses = []
    for i in range(BUDGET + 3):
        resp = await server.client.put(
            f"/api/artifacts/bucket/out-{i}.bin",
            data=b"bytes",
            headers={"X-Upload-Token": f"ut_{'x' * 40}{i}"},
        )
        statuses.append(resp.status)
    assert statuses == [401] * BUDGET + [429] * 3
    # Asked with Expect: 100-continue, the answer comes before the body is sent.
    resp = await server.client.put(
        "/api/artifacts/bucket/big.bin",
        data=b"x" * 1024,
        headers={"X-Upload-Token": "ut_" + "y" * 43},
        expect100=True,
    )
    assert (resp.status, "Retry-After" in resp.headers) == (429, True)
    (record,) = [e for e in await server.audit(outcome="denied") if e["kind"] == "auth.failed"]
    assert record["detail"]["credential"] == "upload"


async def test_a_refused_permission_is_not_a_failed_sign_in(server: Any) -> None:
    """403s come from a valid token: each is recorded on its own and none throttles."""
    reader = server.bearer(await server.api_token("queue.submit", name="reader"))
    for _ in range(BUDGET + 5):
        resp = await server.client.get("/api/admin/workers", headers=reader)
        assert resp.status == 403
    assert len(await server.audit(kind="auth.failed")) == BUDGET + 5
    assert await _guess_api(server, 1) == [401]


async def test_the_budget_is_a_server_flag(make_server: Any) -> None:
    server = await make_server(limits=Limits(auth_failures_per_window=2, auth_failure_window_s=5))
    statuses = []
    for _ in range(3):
        resp = await server.client.get("/api/queue", headers=server.bearer(new_api_token()))
        statuses.append(resp.status)
    assert statuses == [401, 401, 429]
    assert resp.headers["Retry-After"] == "5"
