"""Assembles the HTTP adapter: middlewares, authentication over the fleet, every route."""

from __future__ import annotations

from aiohttp import web

from tunefleet import __version__
from tunefleet.actors.clock import RealClock
from tunefleet.audit import AuditKind
from tunefleet.http import (  # noqa: F401 - importing declares their routes
    keys,
    routes_admin,
    routes_approvals,
    routes_artifacts,
    routes_auth,
    routes_job_artifacts,
    routes_limits,
    routes_metrics,
    routes_ops,
    routes_preemption,
    routes_queue,
    routes_quotas,
    routes_usage,
    routes_users,
    routes_webhooks,
    routes_workers,
    ui,
)
from tunefleet.http.auth import (
    AUTH_FAILURE_HOOK_KEY,
    AUTHENTICATOR_KEY,
    SESSION_RESOLVER_KEY,
    ApiPrincipal,
    WorkerPrincipal,
)
from tunefleet.http.auth_audit import FailureWindowAudit
from tunefleet.http.auth_throttle import AUTH_THROTTLE_KEY, AuthThrottle
from tunefleet.http.openapi import openapi_handler
from tunefleet.http.principal_streams import PRINCIPAL_STREAMS_KEY, PrincipalStreams
from tunefleet.http.principals import Principals, resolve_session
from tunefleet.http.route_table import routes
from tunefleet.http.sessions import SESSIONS_KEY, Session, Sessions
from tunefleet.http.sign_in import USER_THROTTLE_KEY
from tunefleet.http.stream_watch import StreamWatch
from tunefleet.limits import Limits

# An API token's last use is recorded at most this often: one write a minute, not one
# per request.
_TOUCH_EVERY_S = 60.0


class FleetAuthenticator:
    """Resolves token hashes: worker tokens from the fleet's in-memory map (rotation
    updates it at once), API tokens from storage."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.principals = Principals()

    async def resolve_worker(self, token_hash: str) -> WorkerPrincipal | None:
        fleet = self.app.get(keys.FLEET)
        worker_id = fleet.worker_for_token(token_hash) if fleet is not None else None
        return WorkerPrincipal(worker_id) if worker_id is not None else None

    async def resolve_session(self, session: Session) -> ApiPrincipal | None:
        store = self.app.get(keys.STORE)
        return await resolve_session(store, session) if store is not None else None

    async def resolve_api(self, token_hash: str) -> ApiPrincipal | None:
        """The token's principal (http/principals.py); UserDisabled for a disabled user's."""
        store = self.app.get(keys.STORE)
        if store is None:
            return None
        row = await store.api_token_by_hash(token_hash)
        if row is None or row.revoked_at is not None:
            return None
        now = self.app[keys.CLOCK].time()
        if row.last_used_at is None or not 0 <= now - row.last_used_at < _TOUCH_EVERY_S:
            await store.touch_api_token(row.id)
        return await self.principals.resolve(store, token_hash, row)


async def audit_auth_failure(request: web.Request, kind: str, reason: str) -> None:
    # Counted in the metrics by auth.report_auth_failure, which calls this.
    audit = request.app.get(keys.AUDIT)
    if audit is None:
        return
    event = (
        AuditKind.WORKER_REGISTER_FAILED
        if request.path == "/api/workers/register"
        else AuditKind.AUTH_FAILED
    )
    await audit.record(
        event,
        actor=None,
        outcome="denied",
        client_address=request.remote,
        target=f"{request.method} {request.path}",
        credential=kind,
        reason=reason,
    )


def build_routes(app: web.Application) -> None:
    authenticator = FleetAuthenticator(app)
    app[AUTHENTICATOR_KEY] = authenticator
    app[SESSION_RESOLVER_KEY] = authenticator.resolve_session
    app[AUTH_FAILURE_HOOK_KEY] = audit_auth_failure
    app[keys.OPEN_STREAMS] = StreamWatch()
    app[PRINCIPAL_STREAMS_KEY] = PrincipalStreams()
    install_auth_throttle(app)
    routes.add_to(app)
    app.router.add_get("/api/openapi.json", openapi_handler(routes, __version__))
    ui.add_routes(app, headers_hook=False)  # build_app's one prepare hook sets them


def install_auth_throttle(app: web.Application) -> None:
    """Failed sign-ins per address, bounded by the server's limits; each window summed up
    in the audit log, the open ones at shutdown (before the audit log closes)."""
    options = app.get(keys.OPTIONS)
    limits = options.limits if options is not None else Limits()
    window_audit = FailureWindowAudit(app)
    clock = app.get(keys.CLOCK) or RealClock()
    app[AUTH_THROTTLE_KEY] = AuthThrottle(
        limits.auth_failures_per_window, limits.auth_failure_window_s, clock, window_audit
    )
    # The same bound per user name (whatever the address), for password sign-ins: a
    # guesser spread over many addresses still gets 10 tries a user per 15 minutes.
    app[USER_THROTTLE_KEY] = AuthThrottle(
        limits.sign_in_failures_per_user, limits.sign_in_user_window_s, clock, window_audit
    )
    app[SESSIONS_KEY] = Sessions(clock, limits.session_idle_s, limits.session_max_s)

    async def close_windows(app: web.Application) -> None:
        app[AUTH_THROTTLE_KEY].close()
        app[USER_THROTTLE_KEY].close()
        await window_audit.drain()

    app.on_shutdown.append(close_windows)
