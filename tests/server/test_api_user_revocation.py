"""Disabling a user ends the streams their tokens hold open, as revoking one token does
(tests/server/test_api_revocation.py); so does a role that allows less, or leaving a team.

Each stream is held under its token and its user (http/principal_streams.py): a stream
checked once when it opened would otherwise go on sending a disabled user the events and
log lines written after, or a demoted one what only their old role could see.
"""

from __future__ import annotations

import time
from typing import Any

from tests.server.protocol import EventStream
from tests.server.users_testkit import make_user, submit_as
from tunefleet.http.principal_streams import PRINCIPAL_STREAMS_KEY, user_owner

# How soon after the admin's change a stream must have ended.
WITHIN_S = 1.0


async def _open(server: Any, path: str, headers: dict[str, str]) -> EventStream:
    resp = await server.client.get(path, headers=headers)
    assert resp.status == 200, await resp.text()
    return EventStream(resp)


async def _user_id(server: Any, name: str) -> int:
    row = await server.store.users.user(name)
    assert row is not None
    return int(row.id)


async def test_a_disabled_users_event_feed_and_log_follow_end_and_get_nothing_after(
    server: Any,
) -> None:
    await server.ok("POST", "/api/admin/teams", {"name": "ml"})
    alice = await make_user(server, "alice", "researcher", ["ml"])
    worker = await server.connected_worker()
    job_id = await submit_as(server, alice, target="worker")
    assert (await worker.take_job())["job_id"] == job_id
    await worker.send_logs(job_id, ["before"])

    feed = await _open(server, "/api/events", alice)
    await feed.expect("hello")
    follow = await _open(server, f"/api/queue/{job_id}/logs?follow=true", alice)
    assert (await follow.expect("log")).data["line"] == "before"
    # Her feed shows her job's events while she is enabled.
    await worker.send_logs(job_id, ["still enabled"], first_seq=1)
    assert (await follow.expect("log")).data["line"] == "still enabled"
    assert (await feed.expect("job_logs")).data["job_id"] == job_id
    streams = server.app[PRINCIPAL_STREAMS_KEY]
    assert streams.held_by(user_owner(await _user_id(server, "alice"))) == 2

    disabled_at = time.monotonic()
    await server.ok("POST", "/api/admin/users/alice/disable")
    # Written after the disable: a log line of her job and its cancellation.
    resp = await worker.send_logs(job_id, ["after the disable"], first_seq=2)
    assert resp.status == 200
    await server.ok("POST", f"/api/queue/{job_id}/cancel", {})

    for stream in (feed, follow):
        await stream.expect_closed(timeout_s=WITHIN_S)
    assert time.monotonic() - disabled_at < WITHIN_S
    assert b"after the disable" not in follow.raw
    assert b"after the disable" not in feed.raw
    assert b"cancel" not in feed.raw.split(b"still enabled", 1)[-1]
    assert streams.held_by(user_owner(await _user_id(server, "alice"))) == 0
    # Reconnecting is refused; the job and its lines are untouched for the admin.
    resp = await server.client.get("/api/events", headers=alice)
    assert resp.status == 401
    page = await server.ok("GET", f"/api/queue/{job_id}/logs")
    assert [line["line"] for line in page["lines"]] == [
        "before",
        "still enabled",
        "after the disable",
    ]
    worker.close()


async def test_disabling_one_user_leaves_anothers_streams_open(server: Any) -> None:
    await server.ok("POST", "/api/admin/teams", {"name": "ml"})
    alice = await make_user(server, "alice", "researcher", ["ml"])
    carol = await make_user(server, "carol", "researcher", ["ml"])
    doomed = await _open(server, "/api/events", alice)
    survivor = await _open(server, "/api/events", carol)
    admin_feed = await _open(server, "/api/events", server.admin)
    for feed in (doomed, survivor, admin_feed):
        await feed.expect("hello")

    await server.ok("POST", "/api/admin/users/alice/disable")
    job_id = await submit_as(server, carol, target="worker")

    await doomed.expect_closed(timeout_s=WITHIN_S)
    for feed in (survivor, admin_feed):
        assert (await feed.expect("job")).data["job_id"] == job_id
        feed.close()


async def test_a_lower_role_ends_the_users_streams_and_a_higher_one_does_not(
    server: Any,
) -> None:
    await server.ok("POST", "/api/admin/teams", {"name": "ml"})
    bob = await make_user(server, "bob", "lead", ["ml"])
    alice = await make_user(server, "alice", "researcher", ["ml"])
    demoted = await _open(server, "/api/events", bob)
    promoted = await _open(server, "/api/events", alice)
    for feed in (demoted, promoted):
        await feed.expect("hello")

    await server.ok("POST", "/api/admin/users/bob/role", {"role": "researcher"})
    await server.ok("POST", "/api/admin/users/alice/role", {"role": "lead"})
    job_id = await submit_as(server, bob, target="worker")

    await demoted.expect_closed(timeout_s=WITHIN_S)
    assert b"job" not in demoted.raw.split(b"hello", 1)[1]
    # Allowed more, not less: her feed goes on (a reconnect would show no more jobs).
    assert (await promoted.expect("job")).data["job_id"] == job_id
    promoted.close()
    # Bob reconnects under his new role.
    again = await _open(server, "/api/events", bob)
    await again.expect("hello")
    again.close()


async def test_a_grant_taken_back_and_leaving_a_team_end_the_users_streams(
    server: Any,
) -> None:
    for team in ("ml", "vision"):
        await server.ok("POST", "/api/admin/teams", {"name": team})
    alice = await make_user(server, "alice", "researcher", ["ml", "vision"], ("queue.local",))
    feed = await _open(server, "/api/events", alice)
    await feed.expect("hello")
    await server.ok("POST", "/api/admin/users/alice/role", {"role": "researcher", "grants": []})
    await feed.expect_closed(timeout_s=WITHIN_S)

    feed = await _open(server, "/api/events", alice)
    await feed.expect("hello")
    resp = await server.delete("/api/admin/teams/vision/members/alice")
    assert resp.status == 200
    await feed.expect_closed(timeout_s=WITHIN_S)
