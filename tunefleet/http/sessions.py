"""Signed-in people's sessions (issue 24): the web UI's cookie instead of a token.

A session is kept in this process's memory under the SHA-256 of its id (the cookie holds
the id; a memory dump or a log holds only hashes). It ends after ``idle_s`` without a
request, ``max_s`` after sign-in whatever the use, at sign-out, and for every session of
a user who is disabled or whose password changes (``revoke_user``). A server restart or
failover ends every session: people sign in again, tokens keep working.

Each session has its own CSRF token, which the page sends as ``X-CSRF-Token`` on every
state-changing request made with the cookie (the cookie is SameSite=Strict as well; the
token is the check that does not depend on the browser).
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from aiohttp import web

from tunefleet.actors.clock import Clock
from tunefleet.tokens import hash_token

SESSION_COOKIE = "tunefleet_session"
CSRF_HEADER = "X-CSRF-Token"
DEFAULT_IDLE_S = 8 * 3600.0
DEFAULT_MAX_S = 7 * 86400.0
MAX_SESSIONS = 100_000  # never an unbounded map: past it the least recently used end


@dataclass(slots=True)
class Session:
    user_id: int
    user: str
    csrf_token: str
    id_hash: str
    opened_at: float  # the clock's monotonic scale
    seen_at: float

    def csrf_matches(self, sent: str | None) -> bool:
        return sent is not None and hmac.compare_digest(sent.encode(), self.csrf_token.encode())


class Sessions:
    def __init__(
        self,
        clock: Clock,
        idle_s: float = DEFAULT_IDLE_S,
        max_s: float = DEFAULT_MAX_S,
        *,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.idle_s = idle_s
        self.max_s = max_s
        self._clock = clock
        self._max_sessions = max_sessions
        self._by_hash: dict[str, Session] = {}  # insertion order: least recently used first

    def open(self, user_id: int, user: str) -> tuple[str, Session]:
        """A new session for the user: (the id for the cookie, the session)."""
        session_id = secrets.token_urlsafe(32)
        now = self._clock.monotonic()
        session = Session(
            user_id, user, secrets.token_urlsafe(32), hash_token(session_id), now, now
        )
        self._by_hash[session.id_hash] = session
        while len(self._by_hash) > self._max_sessions:
            del self._by_hash[next(iter(self._by_hash))]
        return session_id, session

    def resolve(self, session_id: str) -> Session | None:
        """The live session of this id, its idle time restarted; None when unknown,
        ended or expired (an expired one is forgotten)."""
        id_hash = hash_token(session_id)
        session = self._by_hash.get(id_hash)
        if session is None:
            return None
        now = self._clock.monotonic()
        if now - session.seen_at >= self.idle_s or now - session.opened_at >= self.max_s:
            del self._by_hash[id_hash]
            return None
        session.seen_at = now
        self._by_hash[id_hash] = self._by_hash.pop(id_hash)  # most recently used last
        return session

    def close(self, session_id: str) -> bool:
        """End one session (sign-out); False when it was not open."""
        return self._by_hash.pop(hash_token(session_id), None) is not None

    def revoke_user(self, user_id: int) -> int:
        """End every session of the user (disabled, or a new password); how many."""
        ended = [h for h, s in self._by_hash.items() if s.user_id == user_id]
        for id_hash in ended:
            del self._by_hash[id_hash]
        return len(ended)

    def __len__(self) -> int:
        return len(self._by_hash)


SESSIONS_KEY: web.AppKey[Sessions] = web.AppKey("tunefleet_sessions")


def sessions_of(request: web.Request) -> Sessions | None:
    sessions = request.app.get(SESSIONS_KEY)
    if sessions is None:
        sessions = request.config_dict.get(SESSIONS_KEY)
    return sessions


def revoke_sessions(app: web.Application, user_id: int) -> None:
    sessions = app.get(SESSIONS_KEY)
    if sessions is not None:
        sessions.revoke_user(user_id)


def set_session_cookie(
    request: web.Request, response: web.StreamResponse, session_id: str, max_s: float
) -> None:
    """HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it),
    Secure when the request came over TLS (it then never travels in the clear)."""
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=int(max_s),
        path="/",
        httponly=True,
        samesite="Strict",
        secure=request.secure,
    )


def clear_session_cookie(request: web.Request, response: web.StreamResponse) -> None:
    response.del_cookie(
        SESSION_COOKIE, path="/", httponly=True, samesite="Strict", secure=request.secure
    )
