"""Who is calling: worker tokens (``X-Worker-Token``) and API tokens (``Authorization: Bearer``).

The HTTP layer only extracts and hashes tokens; an ``Authenticator`` the orchestrator puts
on the app (``AUTHENTICATOR_KEY``) maps hashes to principals over storage. Failures go to
the optional ``AUTH_FAILURE_HOOK_KEY`` callable for the audit log; it gets the request,
the kind ("worker" | "api" | "upload") and a reason, never the token.

A refused credential also counts against its client's address (``auth_throttle``, when
the app has one): past the address's budget, credentials that have not authenticated
lately get 429 before any lookup, and only the first failure of a window reaches the hook
(the rest are summed up in one audit event when the window closes).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Literal, NoReturn, Protocol

import structlog
from aiohttp import web

from tunefleet.http import keys
from tunefleet.http.auth_throttle import AuthThrottle, client_key, throttle_of
from tunefleet.http.errors import ApiError
from tunefleet.http.principal_streams import STREAM_MARK_KEY, principal_streams
from tunefleet.http.sessions import CSRF_HEADER, SESSION_COOKIE, Session, sessions_of
from tunefleet.http.tokens import API_TOKEN_PREFIX, WORKER_TOKEN_PREFIX, hash_token

log = structlog.get_logger(__name__)

ADMIN_WORKERS = "admin.workers"
QUEUE_SUBMIT = "queue.submit"
QUEUE_ADMIN = "queue.admin"
AUDIT_READ = "audit.read"
# Choosing the program a job runs (its command, loader env names, an inline config's
# tunefleet_command), and running a job on the orchestrator's own machine: each is more
# than submitting work, so each is a permission of its own (docs/operations.md).
QUEUE_COMMAND = "queue.command"
QUEUE_LOCAL = "queue.local"
# Users and teams (issue 24): administering them, approving a team's jobs, reading a
# team's usage (docs/users-and-teams.md).
ADMIN_USERS = "admin.users"
QUEUE_APPROVE = "queue.approve"
USAGE_READ = "usage.read"
# Webhooks (issue 27): any subscription, any event. Without it a user may still subscribe
# to their own jobs' events (docs/webhooks.md).
ADMIN_WEBHOOKS = "admin.webhooks"
ALL_PERMISSIONS: tuple[str, ...] = (
    ADMIN_WORKERS,
    QUEUE_SUBMIT,
    QUEUE_ADMIN,
    AUDIT_READ,
    QUEUE_COMMAND,
    QUEUE_LOCAL,
    ADMIN_USERS,
    QUEUE_APPROVE,
    USAGE_READ,
    ADMIN_WEBHOOKS,
)
PermissionName = Literal[
    "admin.workers",
    "queue.submit",
    "queue.admin",
    "audit.read",
    "queue.command",
    "queue.local",
    "admin.users",
    "queue.approve",
    "usage.read",
    "admin.webhooks",
]
# The role whose users control the orchestrator (http/roles.py bundles every role).
ADMIN_ROLE = "admin"

WORKER_UNAUTHORIZED = "Invalid worker token"
API_UNAUTHORIZED = "Missing or invalid API token; send Authorization: Bearer <token>"
SESSION_ENDED = (
    "Your session has ended (signed out, expired, or revoked); sign in again "
    "(POST /api/auth/login) or send Authorization: Bearer <token>"
)
CSRF_REFUSED = (
    f"Missing or wrong {CSRF_HEADER} header: a change made with the session cookie must "
    f"send the session's CSRF token (from POST /api/auth/login or GET /api/auth/session) "
    f"as {CSRF_HEADER}"
)
# Reading never changes anything, so only these may go without the CSRF token.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
WORKER_TOKEN_HEADER = "X-Worker-Token"
# The wrong kind of token, recognised by its prefix alone (no lookup, so nothing leaks):
# the protocol's words first, then which token is needed.
API_TOKEN_AS_WORKER = (
    f"{WORKER_UNAUTHORIZED}: this is an API token ({API_TOKEN_PREFIX}...); a worker agent "
    f"needs its worker token ({WORKER_TOKEN_PREFIX}...), which POST /api/admin/workers "
    "or `tunefleet workers create` returns"
)
WORKER_TOKEN_AS_API = (
    f"Invalid API token: this is a worker token ({WORKER_TOKEN_PREFIX}...), which only the "
    f"worker agent uses; send an API token ({API_TOKEN_PREFIX}...) as Authorization: Bearer "
    "<token> (the admin token printed at the first start, or one from `tunefleet tokens create`)"
)

AuthKind = Literal["worker", "api", "upload", "session", "password"]


@dataclass(frozen=True, slots=True)
class ApiPrincipal:
    """A user acting through one API token: ``name`` is the token's, ``permissions`` the
    token's narrowed to the user's role and grants; ``teams`` the user's teams."""

    token_id: str
    name: str
    permissions: frozenset[str]
    user: str = ""
    role: str = ""
    teams: frozenset[str] = frozenset()
    default_team: str | None = None
    user_id: int | None = None

    def has(self, permission: str) -> bool:
        return permission in self.permissions


def controls_orchestrator(principal: ApiPrincipal) -> bool:
    """Whether the principal's user is an admin: sees every job, runs the fleet."""
    return principal.role == ADMIN_ROLE


class UserDisabled(Exception):
    """An API token of a disabled user: refused with its own 401 detail."""

    def __init__(self, user: str) -> None:
        super().__init__(user)
        self.user = user


@dataclass(frozen=True, slots=True)
class WorkerPrincipal:
    """A worker agent holding its worker token."""

    worker_id: str


Principal = ApiPrincipal | WorkerPrincipal


class Authenticator(Protocol):
    """Maps token hashes to principals; None means unknown or revoked. resolve_api raises
    UserDisabled for a token of a disabled user. ``resolve_worker`` must answer from
    memory: it is asked even while the client's address is throttled."""

    async def resolve_api(self, token_hash: str) -> ApiPrincipal | None: ...

    async def resolve_worker(self, token_hash: str) -> WorkerPrincipal | None: ...


AuthFailureHook = Callable[[web.Request, str, str], Awaitable[None] | None]
# A live session → its user's principal (None: the user is gone); raises UserDisabled.
SessionResolver = Callable[[Session], Awaitable[ApiPrincipal | None]]

AUTHENTICATOR_KEY: web.AppKey[Authenticator] = web.AppKey("tunefleet_authenticator")
AUTH_FAILURE_HOOK_KEY: web.AppKey[AuthFailureHook] = web.AppKey("tunefleet_auth_failure_hook")
SESSION_RESOLVER_KEY: web.AppKey[SessionResolver] = web.AppKey("tunefleet_session_resolver")
API_PRINCIPAL_KEY = web.RequestKey("tunefleet_api_principal", ApiPrincipal)
WORKER_PRINCIPAL_KEY = web.RequestKey("tunefleet_worker_principal", WorkerPrincipal)


def _bearer(request: web.Request) -> tuple[str | None, str]:
    """(token, reason it is missing)."""
    header = request.headers.get("Authorization")
    if header is None or not header.strip():
        return None, "no Authorization header"
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None, "Authorization header is not a Bearer token"
    token = value.strip()
    if not token:
        return None, "empty Bearer token"
    return token, ""


def extract_bearer(request: web.Request) -> str | None:
    """The token of ``Authorization: Bearer <token>`` (scheme case-insensitive), or None."""
    return _bearer(request)[0]


def extract_worker_token(request: web.Request) -> str | None:
    """The ``X-Worker-Token`` value with surrounding whitespace removed (the seed document
    warns that pasted tokens carry it), or None when absent or blank."""
    value = request.headers.get(WORKER_TOKEN_HEADER, "").strip()
    return value or None


def _authenticator(request: web.Request) -> Authenticator:
    # The request's own app first: config_dict builds a chain of every enclosing app on
    # each request, which only a route in a sub-app needs.
    authenticator = request.app.get(AUTHENTICATOR_KEY)
    if authenticator is None:
        authenticator = request.config_dict.get(AUTHENTICATOR_KEY)
    if authenticator is None:
        raise RuntimeError("no Authenticator on the app; set app[AUTHENTICATOR_KEY]")
    return authenticator


async def report_auth_failure(request: web.Request, kind: AuthKind, reason: str) -> None:
    """Count, log and tell the audit hook of one failure, recorded on its own (a refused
    permission, a worker reaching for another's; a refused credential through
    ``refuse_credential``). A failing hook never changes the response."""
    count_auth_failure(request, kind)
    log.info(
        "auth_failed",
        kind=kind,
        reason=reason,
        method=request.method,
        path=request.path,
        client=request.remote,
    )
    hook = request.config_dict.get(AUTH_FAILURE_HOOK_KEY)
    if hook is None:
        return
    try:
        result = hook(request, kind, reason)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("auth_failure_hook_failed", kind=kind, path=request.path)


def count_auth_failure(request: web.Request, kind: str) -> None:
    """Every failure is counted in the metrics, whether or not it is recorded on its own."""
    metrics = request.app.get(keys.METRICS)
    if metrics is not None:
        metrics.auth_failures.labels(kind=kind).inc()
        if request.path == "/api/workers/register":
            metrics.registrations.labels(outcome="rejected").inc()


def throttle_wait_s(request: web.Request, credential_hash: str | None) -> float:
    """0, or how long the client's address must wait: it is past its failed sign-ins and
    this credential has not authenticated lately (then ``refuse_throttled``)."""
    return _wait_s(throttle_of(request), request, credential_hash)


# The helpers below take the request's throttle, looked up once per request by the
# authentication functions: every request passes them (issue 14's per-request cost).


def _wait_s(
    throttle: AuthThrottle | None, request: web.Request, credential_hash: str | None
) -> float:
    if throttle is None or throttle.quiet:
        return 0.0  # nobody failed lately: no need to work out the client's address
    return throttle.wait_s(client_key(request.remote), credential_hash)


def refuse_throttled(request: web.Request, kind: AuthKind, wait_s: float) -> NoReturn:
    """429 with Retry-After, before any lookup; not recorded on its own (the address's
    window summary counts it)."""
    count_auth_failure(request, kind)
    throttle = throttle_of(request)
    if throttle is not None:
        target = f"{request.method} {request.path}"
        throttle.refused_unchecked(client_key(request.remote), kind, target)
    retry_after = max(1, math.ceil(wait_s))
    raise ApiError(
        429,
        f"too many failed sign-ins from this address; try again in {retry_after} s "
        "with a valid token",
        headers={"Retry-After": str(retry_after)},
    )


def admit_credential(request: web.Request, kind: AuthKind, credential_hash: str | None) -> None:
    """429 unless the credential may be looked up (``throttle_wait_s``)."""
    _admit(throttle_of(request), request, kind, credential_hash)


def _admit(
    throttle: AuthThrottle | None,
    request: web.Request,
    kind: AuthKind,
    credential_hash: str | None,
) -> None:
    wait_s = _wait_s(throttle, request, credential_hash)
    if wait_s > 0:
        refuse_throttled(request, kind, wait_s)


def lookup_counted(request: web.Request) -> AbstractContextManager[None]:
    """Around an awaited credential lookup: it counts against the address's failed
    sign-ins while it runs, so concurrent guesses cannot overshoot the budget."""
    return _lookup_counted(throttle_of(request), request)


def _lookup_counted(
    throttle: AuthThrottle | None, request: web.Request
) -> AbstractContextManager[None]:
    if throttle is None:
        return nullcontext()
    return throttle.lookup(client_key(request.remote))


def credential_good(request: web.Request, credential_hash: str) -> None:
    """A credential that authenticated: it keeps passing while its address is throttled."""
    throttle = throttle_of(request)
    if throttle is not None:
        throttle.succeeded(credential_hash)


async def refuse_credential(
    request: web.Request, kind: AuthKind, reason: str, credential_hash: str | None
) -> None:
    """A missing, unknown or revoked credential: counted against the client's address, and
    recorded on its own when it is the first of the address's window (the rest are summed
    up when the window closes). The caller then raises its 401."""
    throttle = throttle_of(request)
    if throttle is None:
        await report_auth_failure(request, kind, reason)
        return
    target = f"{request.method} {request.path}"
    address = client_key(request.remote)
    if throttle.failed(address, kind, reason, target, credential_hash):
        await report_auth_failure(request, kind, reason)
    else:
        count_auth_failure(request, kind)


async def require_api(
    request: web.Request, permission: str | None = None, *, needed_for: str | None = None
) -> ApiPrincipal:
    """The API principal of this request, holding ``permission`` when one is named.

    401 without a valid bearer token, 403 ``Permission denied: <permission>`` without the
    permission (followed by `` (needed for <needed_for>)`` when the route says what in the
    request asked for it). The principal is kept on the request, so a second call is free.
    """
    principal = request.get(API_PRINCIPAL_KEY)
    if principal is None:
        principal = await _authenticate_api(request)
    if permission is not None and not principal.has(permission):
        await _refuse_permission(request, principal, permission, needed_for)
    return principal


async def _refuse_permission(
    request: web.Request, principal: ApiPrincipal, permission: str, needed_for: str | None
) -> NoReturn:
    why = f" (needed for {needed_for})" if needed_for else ""
    reason = f"token {principal.token_id} lacks {permission}{why}"
    await report_auth_failure(request, "api", reason)
    raise ApiError(403, f"Permission denied: {permission}{why}")


async def require_worker(request: web.Request) -> WorkerPrincipal:
    """The worker this request's ``X-Worker-Token`` belongs to; 401 ``Invalid worker token``
    when it is missing, unknown or revoked (the same words for each, as the protocol says),
    followed by which token is needed when an API token was sent instead."""
    principal = request.get(WORKER_PRINCIPAL_KEY)
    if principal is not None:
        return principal
    return await authenticate_worker(request)


async def _authenticate_api(request: web.Request) -> ApiPrincipal:
    """The bearer token's principal, kept on the request; 401 without one (429 first
    when its address is throttled)."""
    token, reason = _bearer(request)
    if token is None and reason == "no Authorization header":
        session_id = request.cookies.get(SESSION_COOKIE)
        if session_id:
            return await _authenticate_session(request, session_id)
    token_hash = hash_token(token) if token is not None else None
    throttle = throttle_of(request)
    _admit(throttle, request, "api", token_hash)
    streams = principal_streams(request)
    if streams is not None:  # before the lookup: a revoke after it still ends the stream
        request[STREAM_MARK_KEY] = streams.mark()
    principal = None
    if token_hash is not None:
        try:
            with _lookup_counted(throttle, request):
                principal = await _authenticator(request).resolve_api(token_hash)
        except UserDisabled as disabled:
            # Refused like a revoked token: counted against the address, recorded once
            # a window.
            why = f"user {disabled.user} is disabled"
            await refuse_credential(request, "api", why, token_hash)
            raise ApiError(
                401,
                f"API token of user {disabled.user}, who is disabled; an admin can enable "
                f"them (tunefleet users enable {disabled.user})",
                headers={"WWW-Authenticate": "Bearer"},
            ) from None
        reason = "unknown or revoked API token"
    if principal is None:
        await refuse_credential(request, "api", reason, token_hash)
        wrong_kind = token is not None and token.startswith(WORKER_TOKEN_PREFIX)
        detail = WORKER_TOKEN_AS_API if wrong_kind else API_UNAUTHORIZED
        raise ApiError(401, detail, headers={"WWW-Authenticate": "Bearer"})
    if token_hash is not None and throttle is not None:
        throttle.succeeded(token_hash)  # credential_good
    request[API_PRINCIPAL_KEY] = principal
    return principal


async def _authenticate_session(request: web.Request, session_id: str) -> ApiPrincipal:
    """A signed-in person's session cookie (http/sessions.py), resolved to the same
    principal a token of theirs would be (narrowed to nothing less than their role);
    401 once it has ended, 403 for a change without the session's CSRF token."""
    session_hash = hash_token(session_id)
    throttle = throttle_of(request)
    _admit(throttle, request, "session", session_hash)
    streams = principal_streams(request)
    if streams is not None:
        request[STREAM_MARK_KEY] = streams.mark()
    sessions = sessions_of(request)
    session = sessions.resolve(session_id) if sessions is not None else None
    resolver = request.config_dict.get(SESSION_RESOLVER_KEY)
    principal = None
    if session is not None and resolver is not None:
        try:
            with _lookup_counted(throttle, request):
                principal = await resolver(session)
        except UserDisabled as disabled:
            if sessions is not None:
                sessions.revoke_user(session.user_id)
            await refuse_credential(
                request, "session", f"user {disabled.user} is disabled", session_hash
            )
            raise ApiError(
                401,
                f"User {disabled.user} is disabled, which ended their session; an admin "
                f"can enable them (tunefleet users enable {disabled.user})",
            ) from None
    if session is None or principal is None:
        await refuse_credential(request, "session", "unknown or ended session", session_hash)
        raise ApiError(401, SESSION_ENDED)
    if request.method not in SAFE_METHODS and not session.csrf_matches(
        request.headers.get(CSRF_HEADER)
    ):
        await report_auth_failure(
            request, "session", f"CSRF token missing or wrong ({session.user})"
        )
        raise ApiError(403, CSRF_REFUSED)
    if throttle is not None:
        throttle.succeeded(session_hash)  # credential_good
    request[API_PRINCIPAL_KEY] = principal
    return principal


async def authenticate_worker(request: web.Request) -> WorkerPrincipal:
    """The X-Worker-Token's principal, kept on the request; 401 without one (429 first
    when its address is throttled). What a route declared ``auth="worker"`` runs first
    (``authorize``)."""
    token = extract_worker_token(request)
    token_hash = hash_token(token) if token is not None else None
    throttle = throttle_of(request)
    wait_s = _wait_s(throttle, request, token_hash)
    if token is None or token_hash is None:
        if wait_s > 0:
            refuse_throttled(request, "worker", wait_s)
        reason = f"no {WORKER_TOKEN_HEADER} header"
        await refuse_credential(request, "worker", reason, None)
        raise ApiError(401, WORKER_UNAUTHORIZED)
    # Worker tokens are resolved in memory, so even a throttled address's are: a worker
    # behind a guesser's NAT keeps (or, after a restart, regains) its place.
    principal = await _authenticator(request).resolve_worker(token_hash)
    if principal is None and wait_s > 0:
        refuse_throttled(request, "worker", wait_s)
    if principal is None:
        reason = "unknown or revoked worker token"
        await refuse_credential(request, "worker", reason, token_hash)
        wrong_kind = token.startswith(API_TOKEN_PREFIX)
        raise ApiError(401, API_TOKEN_AS_WORKER if wrong_kind else WORKER_UNAUTHORIZED)
    if throttle is not None:
        throttle.succeeded(token_hash)  # credential_good
    request[WORKER_PRINCIPAL_KEY] = principal
    return principal


def check_grantable(principal: ApiPrincipal, permissions: Iterable[str]) -> None:
    """A token may only hand out permissions it holds itself (403 otherwise), so creating
    tokens cannot widen anyone's access."""
    missing = sorted(set(permissions) - principal.permissions)
    if missing:
        raise ApiError(
            403, f"Permission denied: cannot grant {', '.join(missing)}, which this token lacks"
        )


# --- declared auth for routes ("none" | "worker" | "api" | "api:<permission>") ---------


@dataclass(frozen=True, slots=True)
class AuthRequirement:
    # "upload": an X-Upload-Token, which the artifact routes check themselves (it opens
    # one job's prefix, and only the artifact service knows which).
    kind: Literal["none", "worker", "api", "upload"]
    permission: str | None = None


def parse_auth(spec: str) -> AuthRequirement:
    """Read a route's declared auth; a typo is an error at import time, not a silent hole."""
    if spec == "none":
        return AuthRequirement("none")
    if spec == "worker":
        return AuthRequirement("worker")
    if spec == "api":
        return AuthRequirement("api")
    if spec == "upload":
        return AuthRequirement("upload")
    kind, _, permission = spec.partition(":")
    if kind == "api" and permission in ALL_PERMISSIONS:
        return AuthRequirement("api", permission)
    raise ValueError(
        f"auth must be 'none', 'worker', 'upload', 'api' or 'api:<permission>' with a "
        "permission of "
        f"{', '.join(ALL_PERMISSIONS)}; got {spec!r}"
    )


async def authorize(request: web.Request, requirement: AuthRequirement) -> Principal | None:
    """Enforce a declared requirement; the principal, or None for public routes.

    The route's guard is the first to ask, so it authenticates at once,
    without looking for a principal already kept (a miss raises and catches a KeyError
    inside aiohttp's request mapping: on every heartbeat and status report)."""
    if requirement.kind == "worker":
        return await authenticate_worker(request)
    if requirement.kind == "api":
        principal = await _authenticate_api(request)
        permission = requirement.permission
        if permission is not None and not principal.has(permission):
            await _refuse_permission(request, principal, permission, None)
        return principal
    return None
