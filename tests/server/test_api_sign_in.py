"""People sign in to the web UI with a password (issue 24, item 3).

A session cookie (HttpOnly, SameSite=Strict, Secure under TLS) stands in for a token:
every route works with either. Changes made with the cookie need the session's CSRF
token; sessions end when idle, at their absolute limit, at sign-out, and when the user is
disabled or their password changes. Failed sign-ins count per address and per user name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.server.protocol import EventStream
from tests.server.users_testkit import make_user
from tunefleet.http.auth import CSRF_REFUSED, SESSION_ENDED
from tunefleet.http.sessions import CSRF_HEADER, SESSION_COOKIE
from tunefleet.http.sign_in import WRONG_CURRENT_PASSWORD, WRONG_PASSWORD
from tunefleet.limits import Limits

PASSWORD = "correct horse battery"
IDLE_S = Limits().session_idle_s
MAX_S = Limits().session_max_s


async def _login(
    server: Any, name: str = "alice", password: str = PASSWORD
) -> tuple[str, dict[str, Any]]:
    """Sign in; (the session id, the answer). The client keeps no cookie: each test sends
    the one it means to, so two sessions can be told apart."""
    resp = await server.client.post(
        "/api/auth/login", json={"username": name, "password": password}
    )
    data = await resp.json()
    assert resp.status == 200, data
    session_id = resp.cookies[SESSION_COOKIE].value
    server.client.session.cookie_jar.clear()
    return session_id, data


def _cookie(session_id: str, csrf: str | None = None) -> dict[str, str]:
    headers = {"Cookie": f"{SESSION_COOKIE}={session_id}"}
    if csrf is not None:
        headers[CSRF_HEADER] = csrf
    return headers


async def _alice(server: Any) -> dict[str, str]:
    await server.ok("POST", "/api/admin/teams", {"name": "ml"})
    token = await make_user(server, "alice", "researcher", ["ml"])
    await server.ok("POST", "/api/admin/users/alice/password", {"password": PASSWORD})
    return token


async def test_a_user_signs_in_with_a_password_and_the_cookie_works_like_a_token(
    server: Any,
) -> None:
    await _alice(server)
    resp = await server.client.post(
        "/api/auth/login", json={"username": "alice", "password": PASSWORD}
    )
    data = await resp.json()
    assert resp.status == 200, data
    assert (data["user"], data["role"], data["teams"]) == ("alice", "researcher", ["ml"])
    assert "queue.submit" in data["permissions"] and data["csrf_token"]
    morsel = resp.cookies[SESSION_COOKIE]
    assert morsel["httponly"] and morsel["samesite"] == "Strict"
    assert not morsel["secure"]  # plain HTTP here; Secure under TLS (test_sessions.py)
    session_id = morsel.value
    server.client.session.cookie_jar.clear()

    me = await server.client.get("/api/auth/whoami", headers=_cookie(session_id))
    assert (await me.json())["user"] == "alice"
    shown = await (await server.client.get("/api/auth/session", headers=_cookie(session_id))).json()
    assert shown["csrf_token"] == data["csrf_token"]
    submit = await server.client.post(
        "/api/queue/submit",
        json={"config": {"model_type": "lora"}},
        headers=_cookie(session_id, data["csrf_token"]),
    )
    assert submit.status == 200, await submit.text()
    events = await server.audit(kind="user.signed_in")
    assert [e["target"] for e in events] == ["user:alice"]


async def test_no_default_passwords_and_wrong_ones_get_one_answer(server: Any) -> None:
    await server.ok("POST", "/api/admin/teams", {"name": "ml"})
    await make_user(server, "bob", "researcher", ["ml"])
    for name, password in (("bob", ""), ("bob", "anything at all"), ("nobody", PASSWORD)):
        resp = await server.client.post(
            "/api/auth/login", json={"username": name, "password": password or "x"}
        )
        assert (resp.status, (await resp.json())["detail"]) == (401, WRONG_PASSWORD)
        assert SESSION_COOKIE not in resp.cookies
    # The first admin has no password either: a token is how they start.
    resp = await server.client.post(
        "/api/auth/login", json={"username": "admin", "password": PASSWORD}
    )
    assert resp.status == 401


async def test_setting_a_password_refuses_bad_ones_and_unknown_users(server: Any) -> None:
    await _alice(server)
    resp = await server.post("/api/admin/users/alice/password", {"password": "short"})
    assert resp.status == 400 and "at least 10 characters" in (await resp.json())["detail"]
    resp = await server.post("/api/admin/users/alice/password", {"password": " " * 12})
    assert resp.status == 400
    resp = await server.post("/api/admin/users/nobody/password", {"password": PASSWORD})
    assert resp.status == 404 and "unknown user: nobody" in (await resp.json())["detail"]
    # The refused ones changed nothing: the first password still signs in.
    await _login(server)
    # Only admins set others' passwords.
    token = await make_user(server, "carol", "lead", ["ml"])
    resp = await server.post("/api/admin/users/alice/password", {"password": PASSWORD}, token)
    assert resp.status == 403


async def test_a_change_made_with_the_cookie_needs_the_csrf_token(server: Any) -> None:
    token = await _alice(server)
    session_id, _ = await _login(server)
    body = {"config": {"model_type": "lora"}}
    for csrf in (None, "not-the-token"):
        resp = await server.client.post(
            "/api/queue/submit", json=body, headers=_cookie(session_id, csrf)
        )
        assert (resp.status, (await resp.json())["detail"]) == (403, CSRF_REFUSED)
    assert (await server.ok("GET", "/api/queue"))["total"] == 0  # nothing was submitted
    # Reading needs none; a token needs none.
    assert (await server.client.get("/api/queue", headers=_cookie(session_id))).status == 200
    assert (await server.client.post("/api/queue/submit", json=body, headers=token)).status == 200


async def test_a_session_ends_when_idle_and_at_its_absolute_limit(server: Any) -> None:
    await _alice(server)
    session_id, _ = await _login(server)
    await server.clock.advance(IDLE_S - 1)
    assert (await server.client.get("/api/queue", headers=_cookie(session_id))).status == 200
    await server.clock.advance(IDLE_S)
    resp = await server.client.get("/api/queue", headers=_cookie(session_id))
    assert (resp.status, (await resp.json())["detail"]) == (401, SESSION_ENDED)

    kept, _ = await _login(server)
    used_for = 0.0
    while used_for + IDLE_S / 2 < MAX_S:  # used all along, never idle
        await server.clock.advance(IDLE_S / 2)
        used_for += IDLE_S / 2
        assert (await server.client.get("/api/queue", headers=_cookie(kept))).status == 200
    await server.clock.advance(MAX_S - used_for)
    assert (await server.client.get("/api/queue", headers=_cookie(kept))).status == 401


async def test_disabling_a_user_ends_their_sessions_for_good(server: Any) -> None:
    await _alice(server)
    session_id, _ = await _login(server)
    await server.ok("POST", "/api/admin/users/alice/disable")
    resp = await server.client.get("/api/queue", headers=_cookie(session_id))
    assert resp.status == 401
    resp = await server.client.post(
        "/api/auth/login", json={"username": "alice", "password": PASSWORD}
    )
    assert resp.status == 401 and "alice is disabled" in (await resp.json())["detail"]
    await server.ok("POST", "/api/admin/users/alice/enable")
    # Enabling again does not bring the old session back: she signs in anew.
    assert (await server.client.get("/api/queue", headers=_cookie(session_id))).status == 401
    await _login(server)


async def test_a_new_password_ends_every_session_of_the_user(server: Any) -> None:
    await _alice(server)
    first, _ = await _login(server)
    second, _ = await _login(server)
    await server.ok("POST", "/api/admin/users/alice/password", {"password": "a new passphrase"})
    for session_id in (first, second):
        assert (await server.client.get("/api/queue", headers=_cookie(session_id))).status == 401
    resp = await server.client.post(
        "/api/auth/login", json={"username": "alice", "password": PASSWORD}
    )
    assert resp.status == 401
    await _login(server, password="a new passphrase")


async def test_changing_ones_own_password_keeps_this_page_and_ends_the_others(
    server: Any,
) -> None:
    await _alice(server)
    other, _ = await _login(server)
    mine, data = await _login(server)
    headers = _cookie(mine, data["csrf_token"])
    wrong = {"current_password": "not my password", "new_password": "a new passphrase"}
    resp = await server.client.post("/api/auth/password", json=wrong, headers=headers)
    # 403, not 401: she is signed in, and a 401 would sign her page out.
    assert (resp.status, (await resp.json())["detail"]) == (403, WRONG_CURRENT_PASSWORD)
    short = {"current_password": PASSWORD, "new_password": "short"}
    resp = await server.client.post("/api/auth/password", json=short, headers=headers)
    assert resp.status == 400
    good = {"current_password": PASSWORD, "new_password": "a new passphrase"}
    resp = await server.client.post("/api/auth/password", json=good, headers=headers)
    assert resp.status == 200, await resp.text()
    renewed = resp.cookies[SESSION_COOKIE].value
    server.client.session.cookie_jar.clear()
    for ended in (other, mine):
        assert (await server.client.get("/api/queue", headers=_cookie(ended))).status == 401
    assert (await server.client.get("/api/queue", headers=_cookie(renewed))).status == 200
    await _login(server, password="a new passphrase")
    assert [e["target"] for e in await server.audit(kind="user.password_set")] == [
        "user:alice",
        "user:alice",
    ]


async def test_signing_out_ends_the_session_and_clears_the_cookie(server: Any) -> None:
    token = await _alice(server)
    session_id, data = await _login(server)
    resp = await server.client.post("/api/auth/logout", headers=_cookie(session_id))
    assert resp.status == 403  # signing out is a change: the CSRF token is asked too
    resp = await server.client.post(
        "/api/auth/logout", headers=_cookie(session_id, data["csrf_token"])
    )
    assert resp.status == 200 and resp.cookies[SESSION_COOKIE].value == ""
    server.client.session.cookie_jar.clear()
    assert (await server.client.get("/api/queue", headers=_cookie(session_id))).status == 401
    resp = await server.client.post("/api/auth/logout", headers=token)
    assert resp.status == 400 and "made with a token" in (await resp.json())["detail"]


@pytest.fixture
async def neighbour(server: Any) -> AsyncIterator[aiohttp.ClientSession]:
    """A client on another loopback address (127.0.0.2): another address to the server."""
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    session = aiohttp.ClientSession(str(server.client.make_url("")), connector=connector)
    try:
        yield session
    finally:
        await session.close()


async def test_a_user_name_is_throttled_from_every_address_and_audited_in_sum(
    server: Any, neighbour: aiohttp.ClientSession
) -> None:
    await _alice(server)
    budget = Limits().sign_in_failures_per_user
    wrong = {"username": "alice", "password": "a guessed password"}
    for i in range(budget):
        client = neighbour if i % 2 else server.client.session
        resp = await client.post(server.client.make_url("/api/auth/login"), json=wrong)
        assert resp.status == 401
    # Past the name's budget even the right password waits, from either address.
    right = {"username": "alice", "password": PASSWORD}
    for client in (server.client.session, neighbour):
        resp = await client.post(server.client.make_url("/api/auth/login"), json=right)
        assert resp.status == 429 and "for user alice" in (await resp.json())["detail"]
        assert int(resp.headers["Retry-After"]) > 0
    # Another name is not held back.
    await server.ok("POST", "/api/admin/users", {"name": "bob", "role": "viewer"})
    await server.ok("POST", "/api/admin/users/bob/password", {"password": PASSWORD})
    await _login(server, "bob")
    await server.clock.advance(Limits().sign_in_user_window_s)
    await server.settle()
    await _login(server)
    denied = [e for e in await server.audit(outcome="denied") if "password" in str(e)]
    kinds = sorted(e["kind"] for e in denied)
    assert "auth.failed" in kinds and "auth.failed_window" in kinds
    summaries = [e for e in denied if e["kind"] == "auth.failed_window"]
    assert any(e["detail"]["attempts"] == budget + 2 for e in summaries)


async def test_a_new_password_ends_the_sessions_open_event_feed(server: Any) -> None:
    await _alice(server)
    session_id, _ = await _login(server)
    resp = await server.client.get("/api/events", headers=_cookie(session_id))
    assert resp.status == 200, await resp.text()
    feed = EventStream(resp)
    await feed.expect("hello")
    await server.ok("POST", "/api/admin/users/alice/password", {"password": "a new passphrase"})
    await feed.expect_closed(timeout_s=1.0)


async def test_changing_ones_password_with_a_token_asks_the_current_one_too(
    server: Any,
) -> None:
    token = await _alice(server)
    session_id, _ = await _login(server)
    good = {"current_password": PASSWORD, "new_password": "a new passphrase"}
    resp = await server.client.post("/api/auth/password", json=good, headers=token)
    data = await resp.json()
    assert resp.status == 200 and data["csrf_token"] is None and data["user"] == "alice"
    assert SESSION_COOKIE not in resp.cookies  # a token opens no session
    assert (await server.client.get("/api/queue", headers=_cookie(session_id))).status == 401
    # The admin token's user (admin) has no password: there is none to confirm.
    resp = await server.post("/api/auth/password", good)
    assert (resp.status, (await resp.json())["detail"]) == (403, WRONG_CURRENT_PASSWORD)


async def test_a_guessed_session_cookie_is_refused_and_audited_without_its_value(
    server: Any,
) -> None:
    resp = await server.client.get("/api/queue", headers=_cookie("a-guessed-session-id"))
    assert (resp.status, (await resp.json())["detail"]) == (401, SESSION_ENDED)
    failed = await server.audit(kind="auth.failed")
    assert [(e["detail"]["credential"], e["detail"]["reason"]) for e in failed] == [
        ("session", "unknown or ended session")
    ]
    assert "a-guessed-session-id" not in str(failed)


async def test_a_bearer_token_wins_over_a_cookie_and_needs_no_csrf_token(server: Any) -> None:
    token = await _alice(server)
    session_id, _ = await _login(server)
    headers = {**_cookie(session_id), **token}
    resp = await server.client.post(
        "/api/queue/submit", json={"config": {"model_type": "lora"}}, headers=headers
    )
    assert resp.status == 200, await resp.text()
