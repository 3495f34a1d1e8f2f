"""People signing in to the web UI with a password (issue 24): sign in, sign out, the
session's facts, changing one's own password, and an admin setting a user's.

A session resolves to the same principal a token of the user's would (http/auth.py), so
every route works with either. Setting a password ends the user's sessions and open
streams: whoever knew the old one is signed out everywhere.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from tunefleet.audit import AuditKind
from tunefleet.http import keys
from tunefleet.http.auth import ALL_PERMISSIONS, ApiPrincipal
from tunefleet.http.body import parse_body
from tunefleet.http.errors import ApiError
from tunefleet.http.passwords import hash_password, password_problem
from tunefleet.http.principal_streams import PRINCIPAL_STREAMS_KEY, user_owner
from tunefleet.http.principals import principal_of_session
from tunefleet.http.route_table import actor_name, principal_of, routes
from tunefleet.http.routes_users import user_view
from tunefleet.http.schemas_users import (
    ChangePasswordRequest,
    LoginRequest,
    SessionView,
    SetPasswordRequest,
    UserView,
)
from tunefleet.http.sessions import (
    SESSION_COOKIE,
    SESSIONS_KEY,
    Session,
    Sessions,
    clear_session_cookie,
    set_session_cookie,
)
from tunefleet.http.sign_in import admit_user, check_password
from tunefleet.storage.store_users import unknown_user

_USER_404 = {404: "Unknown user (the detail names it)"}
_BAD_PASSWORD = {400: "The new password is too short, too long or only spaces"}


def _sessions(request: web.Request) -> Sessions:
    return request.app[SESSIONS_KEY]


def _session_view(
    principal: ApiPrincipal, session: Session | None, sessions: Sessions
) -> dict[str, object]:
    """What the page needs: who it is, what it may do, and (signed in with a password)
    the CSRF token to send with every change."""
    return {
        "user": principal.user,
        "role": principal.role,
        "permissions": [p for p in ALL_PERMISSIONS if principal.has(p)],
        "teams": sorted(principal.teams),
        "default_team": principal.default_team,
        "csrf_token": session.csrf_token if session is not None else None,
        "idle_s": sessions.idle_s,
        "max_s": sessions.max_s,
    }


def _cookie_session(request: web.Request) -> tuple[str, Session] | None:
    """The session this request came with (already checked by the route's auth), or
    None for a request made with a token."""
    if request.headers.get("Authorization"):
        return None
    session_id = request.cookies.get(SESSION_COOKIE)
    if not session_id:
        return None
    session = _sessions(request).resolve(session_id)
    return (session_id, session) if session is not None else None


def _end_user(request: web.Request, user_id: int) -> None:
    """End the user's sessions and the streams they (or their tokens) hold open."""
    _sessions(request).revoke_user(user_id)
    streams = request.app.get(PRINCIPAL_STREAMS_KEY)
    if streams is not None:
        streams.end(user_owner(user_id))


async def _audit(request: web.Request, kind: AuditKind, actor: str, target: str) -> None:
    audit = request.app.get(keys.AUDIT)
    if audit is not None:
        await audit.record(kind, actor=actor, target=target, client_address=request.remote)


async def _new_password_hash(password: str) -> str:
    problem = password_problem(password)
    if problem is not None:
        raise ApiError(400, f"{problem}; choose another")
    return await asyncio.to_thread(hash_password, password)


@routes.route(
    "POST",
    "/api/auth/login",
    summary="Sign in with a user name and password: a session cookie and its CSRF token",
    request=LoginRequest,
    response=SessionView,
    auth="none",
    errors={
        401: "Wrong user name or password, no password set, or the user is disabled",
        429: "Too many failed sign-ins from this address or for this user name",
    },
)
async def login(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, LoginRequest)
    admit_user(request, body.username)
    store = request.app[keys.STORE]
    row = await check_password(request, store, body.username, body.password)
    if row.disabled:
        raise ApiError(
            401,
            f"User {row.name} is disabled; an admin can enable them "
            f"(tunefleet users enable {row.name})",
        )
    sessions = _sessions(request)
    session_id, session = sessions.open(row.id, row.name)
    await _audit(request, AuditKind.USER_SIGNED_IN, f"user:{row.name}", f"user:{row.name}")
    facts = await store.users.facts(row.id)
    if facts is None:  # the row was just read: only a concurrent write could do this
        raise unknown_user(row.name)
    view = _session_view(principal_of_session(session, facts), session, sessions)
    response = web.json_response(view)
    set_session_cookie(request, response, session_id, sessions.max_s)
    return response


@routes.route(
    "POST",
    "/api/auth/logout",
    summary="Sign out: end this session and clear its cookie",
    auth="api",
    errors={400: "The request was made with a token, not a session"},
)
async def logout(request: web.Request) -> web.StreamResponse:
    found = _cookie_session(request)
    if found is None:
        raise ApiError(
            400,
            "no session to end: this request was made with a token; revoke a token with "
            "DELETE /api/admin/tokens/{id}",
        )
    session_id, session = found
    _sessions(request).close(session_id)
    await _audit(request, AuditKind.USER_SIGNED_OUT, f"user:{session.user}", f"user:{session.user}")
    response = web.json_response({"success": True})
    clear_session_cookie(request, response)
    return response


@routes.route(
    "GET",
    "/api/auth/session",
    summary="Who is signed in, what they may do, and the session's CSRF token",
    response=SessionView,
    auth="api",
)
async def show_session(request: web.Request) -> web.StreamResponse:
    found = _cookie_session(request)
    session = found[1] if found is not None else None
    return web.json_response(_session_view(principal_of(request), session, _sessions(request)))


@routes.route(
    "POST",
    "/api/auth/password",
    summary="Change one's own password (the current one is asked again); other sessions end",
    request=ChangePasswordRequest,
    response=SessionView,
    auth="api",
    errors={**_BAD_PASSWORD, 403: "The current password is wrong", 429: "Too many failures"},
)
async def change_password(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, ChangePasswordRequest)
    principal = principal_of(request)
    admit_user(request, principal.user)
    store = request.app[keys.STORE]
    row = await check_password(
        request, store, principal.user, body.current_password, confirming=True
    )
    new_hash = await _new_password_hash(body.new_password)
    await store.users.set_password(row.name, new_hash)
    _end_user(request, row.id)
    await _audit(request, AuditKind.USER_PASSWORD_SET, actor_name(request), f"user:{row.name}")
    sessions = _sessions(request)
    was_session = request.cookies.get(SESSION_COOKIE) and not request.headers.get("Authorization")
    if not was_session:
        return web.json_response(_session_view(principal, None, sessions))
    # The page that changed it stays signed in, in a session of its own.
    session_id, session = sessions.open(row.id, row.name)
    response = web.json_response(_session_view(principal, session, sessions))
    set_session_cookie(request, response, session_id, sessions.max_s)
    return response


@routes.route(
    "POST",
    "/api/admin/users/{name}/password",
    summary="Set a user's password (they can then sign in to the web UI); their sessions end",
    request=SetPasswordRequest,
    response=UserView,
    auth="api:admin.users",
    errors={**_USER_404, **_BAD_PASSWORD},
)
async def set_user_password(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    store = request.app[keys.STORE]
    if await store.users.user(name) is None:  # before the body: the name is what to fix
        raise unknown_user(name)
    body = await parse_body(request, SetPasswordRequest)
    row = await store.users.set_password(name, await _new_password_hash(body.password))
    _end_user(request, row.id)
    await _audit(request, AuditKind.USER_PASSWORD_SET, actor_name(request), f"user:{name}")
    teams = await store.users.memberships(user=row.name)
    return web.json_response(user_view(row, teams))
