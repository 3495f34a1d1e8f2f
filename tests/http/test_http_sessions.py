"""Sessions and passwords as units: expiry by the injectable clock, revocation, the
bound on how many are kept, the cookie's flags (Secure under TLS), argon2id hashes."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from tunefleet.actors.clock import FakeClock
from tunefleet.http.passwords import hash_password, password_matches, password_problem
from tunefleet.http.sessions import (
    SESSION_COOKIE,
    Sessions,
    clear_session_cookie,
    set_session_cookie,
)
from tunefleet.tokens import hash_token


def test_a_session_lives_while_used_and_ends_idle_or_at_its_limit() -> None:
    clock = FakeClock()
    sessions = Sessions(clock, idle_s=100, max_s=250)
    session_id, session = sessions.open(7, "alice")
    assert session.id_hash == hash_token(session_id) and session_id not in session.id_hash
    clock._monotonic += 99
    assert sessions.resolve(session_id) is session
    clock._monotonic += 99  # 99 s since it was last used: alive
    assert sessions.resolve(session_id) is session
    clock._monotonic += 52  # 250 s since sign-in: the absolute limit, however used
    assert sessions.resolve(session_id) is None
    assert len(sessions) == 0  # forgotten, not kept expired

    idle_id, _ = sessions.open(7, "alice")
    clock._monotonic += 100
    assert sessions.resolve(idle_id) is None


def test_revoking_a_user_ends_only_their_sessions() -> None:
    sessions = Sessions(FakeClock())
    a1, _ = sessions.open(1, "alice")
    a2, _ = sessions.open(1, "alice")
    b, _ = sessions.open(2, "bob")
    assert sessions.revoke_user(1) == 2
    assert sessions.resolve(a1) is None and sessions.resolve(a2) is None
    assert sessions.resolve(b) is not None
    assert sessions.close(b) and not sessions.close(b)
    assert sessions.resolve("never-issued") is None


def test_the_least_recently_used_session_ends_past_the_bound() -> None:
    sessions = Sessions(FakeClock(), max_sessions=2)
    first, _ = sessions.open(1, "a")
    second, _ = sessions.open(2, "b")
    assert sessions.resolve(first) is not None  # used: now the most recent
    sessions.open(3, "c")
    assert sessions.resolve(second) is None and sessions.resolve(first) is not None


def test_csrf_tokens_differ_per_session_and_are_compared_exactly() -> None:
    sessions = Sessions(FakeClock())
    _, one = sessions.open(1, "a")
    _, two = sessions.open(1, "a")
    assert one.csrf_token != two.csrf_token
    assert one.csrf_matches(one.csrf_token)
    assert not one.csrf_matches(two.csrf_token)
    assert not one.csrf_matches(None) and not one.csrf_matches("")


def _cookie_header(secure: bool) -> str:
    request = make_mocked_request("POST", "/api/auth/login")
    if secure:
        request = request.clone(scheme="https")
    response = web.Response()
    set_session_cookie(request, response, "the-id", 3600)
    return response.cookies[SESSION_COOKIE].OutputString()


def test_the_cookie_is_httponly_strict_and_secure_under_tls() -> None:
    plain = _cookie_header(secure=False)
    assert plain.startswith(f"{SESSION_COOKIE}=the-id;")
    assert "HttpOnly" in plain and "SameSite=Strict" in plain and "Path=/" in plain
    assert "Max-Age=3600" in plain and "Secure" not in plain
    assert "Secure" in _cookie_header(secure=True)


def test_clearing_the_cookie_expires_it() -> None:
    request = make_mocked_request("POST", "/api/auth/logout")
    response = web.Response()
    clear_session_cookie(request, response)
    header = response.cookies[SESSION_COOKIE].OutputString()
    assert header.startswith(f'{SESSION_COOKIE}="";') and "Max-Age=0" in header


def test_passwords_are_argon2id_and_checked() -> None:
    stored = hash_password("correct horse battery")
    assert stored.startswith("$argon2id$")
    assert password_matches(stored, "correct horse battery")
    assert not password_matches(stored, "correct horse batterY")
    assert not password_matches(None, "anything")  # no password: no sign-in
    assert not password_matches("not a hash", "anything")
    assert password_problem("short") is not None
    assert password_problem(" " * 20) is not None
    assert password_problem("x" * 1025) is not None
    assert password_problem("long enough phrase") is None
