"""Assembles the HTTP adapter: middlewares, authentication over the fleet, every route."""

from __future__ import annotations

from aiohttp import web

from tunefleet import __version__
from tunefleet.audit import AuditKind
from tunefleet.http import (  # noqa: F401 - importing declares their routes
    keys,
    routes_admin,
    routes_artifacts,
    routes_job_artifacts,
    routes_metrics,
    routes_ops,
    routes_queue,
    routes_users,
    routes_workers,
    ui,
)
from tunefleet.http.auth import (
    AUTH_FAILURE_HOOK_KEY,
    AUTHENTICATOR_KEY,
    ApiPrincipal,
    WorkerPrincipal,
)
from tunefleet.http.openapi import openapi_handler
from tunefleet.http.principals import Principals
from tunefleet.http.route_table import routes
from tunefleet.http.stream_watch import StreamWatch

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
    metrics = request.app.get(keys.METRICS)
    if metrics is not None:
        metrics.auth_failures.labels(kind=kind).inc()
        if request.path == "/api/workers/register":
            metrics.registrations.labels(outcome="rejected").inc()
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
    app[AUTHENTICATOR_KEY] = FleetAuthenticator(app)
    app[AUTH_FAILURE_HOOK_KEY] = audit_auth_failure
    app[keys.OPEN_STREAMS] = StreamWatch()
    routes.add_to(app)
    app.router.add_get("/api/openapi.json", openapi_handler(routes, __version__))
    ui.add_routes(app, headers_hook=False)  # build_app's one prepare hook sets them
