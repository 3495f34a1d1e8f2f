"""Revoking an API token ends the streams it holds open (issue 23, finding 4).

Before, a token revoked while its ``/api/events`` feed or a job's ``/logs?follow=true`` was
open kept receiving what was written after the revoke: the credential was checked once,
when the stream opened.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any
from urllib.parse import urlsplit

from tests.server.protocol import EventStream
from tunefleet.http.principal_streams import (
    PRINCIPAL_STREAMS_KEY,
    api_token_owner,
)

SUBMIT = "queue.submit"


async def _token(server: Any, name: str = "page") -> dict[str, Any]:
    return await server.ok("POST", "/api/admin/tokens", {"name": name, "permissions": [SUBMIT]})


async def _open(server: Any, path: str, token: str) -> EventStream:
    resp = await server.client.get(path, headers=server.bearer(token))
    assert resp.status == 200, await resp.text()
    return EventStream(resp)


async def test_a_revoked_tokens_event_feed_ends_and_gets_nothing_after(server: Any) -> None:
    created = await _token(server)
    feed = await _open(server, "/api/events", created["token"])
    await feed.expect("hello")
    await server.submit(target="worker")
    assert (await feed.expect("job")).data["status"] == "pending"

    await server.ok("DELETE", f"/api/admin/tokens/{created['id']}")
    await server.submit(target="worker")  # written after the revoke

    await feed.expect_closed()
    assert b"job" not in feed.raw.split(b"pending", 1)[1]  # nothing after the revoke
    streams = server.app[PRINCIPAL_STREAMS_KEY]
    assert streams.held_by(api_token_owner(created["id"])) == 0


async def test_a_revoked_tokens_log_follow_ends_and_gets_no_later_lines(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await worker.send_logs(job_id, ["before"])
    created = await _token(server)
    follow = await _open(server, f"/api/queue/{job_id}/logs?follow=true", created["token"])
    assert (await follow.expect("log")).data["line"] == "before"

    await server.ok("DELETE", f"/api/admin/tokens/{created['id']}")
    assert (await worker.send_logs(job_id, ["after the revoke"], first_seq=1)).status == 200

    await follow.expect_closed()
    assert b"after the revoke" not in follow.raw
    # The job and its lines are untouched: a valid token still reads both.
    page = await server.ok("GET", f"/api/queue/{job_id}/logs")
    assert [line["line"] for line in page["lines"]] == ["before", "after the revoke"]
    worker.close()


async def test_revoking_one_token_leaves_anothers_streams_open(server: Any) -> None:
    revoked, kept = await _token(server, "revoked"), await _token(server, "kept")
    doomed = await _open(server, "/api/events", revoked["token"])
    survivor = await _open(server, "/api/events", kept["token"])
    admin_feed = await _open(server, "/api/events", server.admin_token)
    for feed in (doomed, survivor, admin_feed):
        await feed.expect("hello")

    await server.ok("DELETE", f"/api/admin/tokens/{revoked['id']}")
    job_id = (await server.submit(target="worker"))["job_id"]

    await doomed.expect_closed()
    for feed in (survivor, admin_feed):
        assert (await feed.expect("job")).data["job_id"] == job_id
        feed.close()


async def test_a_token_revoking_itself_ends_its_own_feed(server: Any) -> None:
    """A token holding admin.workers can revoke itself; its feed ends like any other."""
    created = await server.ok(
        "POST", "/api/admin/tokens", {"name": "self", "permissions": ["admin.workers"]}
    )
    headers = server.bearer(created["token"])
    feed = await _open(server, "/api/events", created["token"])
    await feed.expect("hello")
    resp = await server.client.delete(f"/api/admin/tokens/{created['id']}", headers=headers)
    assert resp.status == 200
    await feed.expect_closed()
    resp = await server.client.get("/api/events", headers=headers)
    assert resp.status == 401


async def test_an_unknown_token_id_ends_nothing(server: Any) -> None:
    created = await _token(server)
    feed = await _open(server, "/api/events", created["token"])
    await feed.expect("hello")
    resp = await server.delete("/api/admin/tokens/999999")
    assert resp.status == 404
    job_id = (await server.submit(target="worker"))["job_id"]
    assert (await feed.expect("job")).data["job_id"] == job_id
    feed.close()


async def test_a_revoked_tokens_download_under_way_is_cut(server: Any) -> None:
    """A long artifact download is a stream like the others: before, it ran to its end
    after the token that started it was revoked."""
    worker = await server.connected_worker()
    submitted = await server.submit(target="worker")
    event = await worker.take_job()
    size = 16 * 1024 * 1024
    put = await server.client.put(
        f"{urlsplit(event['upload_endpoint']).path}/outputs/model.bin",
        data=b"m" * size,
        headers={"X-Upload-Token": event["upload_token"]},
    )
    assert put.status == 200, await put.text()
    created = await _token(server, "downloader")

    # A client that reads slowly (a small receive buffer), so the download is under way.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (server.client.host, server.client.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    path = f"/api/queue/{submitted['job_id']}/artifacts/model.bin"
    bearer = f"Authorization: Bearer {created['token']}"
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n{bearer}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    received = len(await reader.read(64 * 1024))

    await server.ok("DELETE", f"/api/admin/tokens/{created['id']}")
    while chunk := await asyncio.wait_for(reader.read(1024 * 1024), timeout=10):
        received += len(chunk)
    writer.close()
    assert received < size  # cut: the rest was never sent
    streams = server.app[PRINCIPAL_STREAMS_KEY]
    assert streams.held_by(api_token_owner(created["id"])) == 0
