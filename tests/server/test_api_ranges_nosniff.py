"""Issue 23, finding 7: a byte range no byte of the object satisfies gets 416 with
``Content-Range: bytes */<size>`` (RFC 9110 §14.1.2, §15.5.17), never the whole file as
206; and every kind of response says ``X-Content-Type-Options: nosniff``."""

from __future__ import annotations

import pytest

from tests.server.conftest import Server
from tests.server.test_api_artifacts import Uploader, dispatched
from tunefleet.http import ui

DATA = bytes(range(256)) * 4  # 1,024 bytes


async def stored_object(server: Server) -> tuple[Uploader, str]:
    """An object stored by a job's trainer; (its uploader, the people's download path)."""
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    await up.stored("final/model.safetensors", DATA)
    return up, f"/api/queue/{up.job_id}/artifacts/final/model.safetensors"


@pytest.mark.parametrize(
    "spec",
    [
        "bytes=-0",  # a suffix of no bytes (aiohttp read it as the whole file)
        "bytes=-000",
        "bytes=1024-",  # the first byte past the end
        "bytes=5000-6000",
        "bytes=9-3",  # last before first
        "bytes=0-1,5-9",  # several ranges: not served
        "bytes=abc",
        "bytes=" + "9" * 5000 + "-",  # more digits than Python reads as a number
    ],
)
async def test_an_unsatisfiable_range_is_416_with_the_size(server: Server, spec: str) -> None:
    up, path = await stored_object(server)
    for url, headers in (
        (path, server.admin),
        (up.url("final/model.safetensors"), up.headers()),
    ):
        resp = await server.client.get(url, headers={**headers, "Range": spec})
        assert resp.status == 416, (spec[:20], url)
        assert resp.headers["Content-Range"] == f"bytes */{len(DATA)}"
        assert len(await resp.read()) < len(DATA)
        assert resp.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    ("spec", "first", "last"),
    [("bytes=-1", 1023, 1023), ("bytes=-5000", 0, 1023), ("bytes=1000-", 1000, 1023)],
)
async def test_a_satisfiable_range_is_still_206(
    server: Server, spec: str, first: int, last: int
) -> None:
    _, path = await stored_object(server)
    resp = await server.client.get(path, headers={**server.admin, "Range": spec})
    assert resp.status == 206
    assert resp.headers["Content-Range"] == f"bytes {first}-{last}/{len(DATA)}"
    assert await resp.read() == DATA[first : last + 1]


async def test_a_ui_asset_refuses_a_zero_suffix_too(server: Server) -> None:
    asset = f"/static/{server.app[ui.UI_BUILD_KEY]}/favicon.svg"
    whole = await server.client.get(asset)
    assert whole.status == 200
    size = len(await whole.read())
    resp = await server.client.get(asset, headers={"Range": "bytes=-0"})
    assert resp.status == 416
    assert resp.headers["Content-Range"] == f"bytes */{size}"


async def test_every_kind_of_response_says_nosniff(server: Server) -> None:
    """API answers, errors (ours and aiohttp's), the worker's SSE stream, artifacts, the UI
    and /metrics."""
    worker = await server.connected_worker()
    assert worker.stream is not None
    up = Uploader(server, await dispatched(server, worker))
    await up.stored("final/model.safetensors", DATA)
    build = server.app[ui.UI_BUILD_KEY]
    answers = {
        "json": await server.get("/api/queue"),
        "healthz": await server.client.get("/healthz"),
        "our error": await server.get("/api/queue/no-such-job"),
        "unauthenticated": await server.client.get("/api/queue"),
        "unknown route": await server.client.get("/no/such/route"),
        "wrong method": await server.client.delete("/healthz"),
        "artifact": await server.get(f"/api/queue/{up.job_id}/artifacts/final/model.safetensors"),
        "trainer's artifact": await server.client.get(
            up.url("final/model.safetensors"), headers=up.headers()
        ),
        "page": await server.client.get("/"),
        "asset": await server.client.get(f"/static/{build}/favicon.svg"),
        "metrics": await server.get("/metrics"),
        "sse": worker.stream.response,
    }
    for kind, resp in answers.items():
        assert resp.headers.get("X-Content-Type-Options") == "nosniff", kind
    assert answers["our error"].status == 404 and answers["unknown route"].status == 404
    assert answers["unauthenticated"].status == 401 and answers["wrong method"].status == 405
