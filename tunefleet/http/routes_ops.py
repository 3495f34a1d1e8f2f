"""Operations endpoints: health, readiness, metrics, audit, configs, the live event feed."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from tunefleet.actors.records import iso
from tunefleet.fsm.job import JobState
from tunefleet.http import keys
from tunefleet.http.body import parse_query
from tunefleet.http.leadership import refusal_detail
from tunefleet.http.route_table import routes
from tunefleet.http.schemas_admin import AuditListQuery, AuditListResponse, AuditVerifyResponse
from tunefleet.http.sse_follow import stream_events


@routes.route("GET", "/healthz", summary="Liveness: the process answers", tags=["ops"])
async def healthz(request: web.Request) -> web.StreamResponse:
    leadership = request.app.get(keys.LEADERSHIP)
    role = leadership.view() if leadership is not None else {}
    return web.json_response({"status": "ok", **role})


@routes.route(
    "GET",
    "/readyz",
    summary="Readiness: storage answers and the fleet is loaded",
    tags=["ops"],
    errors={
        503: "Not ready: starting, stopping, storage unreachable, or a standby orchestrator "
        "(status names the role, active_url the active one)"
    },
)
async def readyz(request: web.Request) -> web.StreamResponse:
    leadership = request.app.get(keys.LEADERSHIP)
    if leadership is not None and leadership.role != "active":
        detail = refusal_detail(leadership)
        return web.json_response(
            {"status": leadership.role, "detail": detail, "active_url": leadership.active_url},
            status=503,
        )
    fleet = request.app.get(keys.FLEET)
    store = request.app.get(keys.STORE)
    if fleet is None or store is None:
        return web.json_response({"status": "starting", "detail": "loading the fleet"}, status=503)
    try:
        await asyncio.wait_for(store.job_counts(), timeout=5.0)
    except Exception as error:
        detail = f"storage not answering: {type(error).__name__}"
        return web.json_response({"status": "unavailable", "detail": detail}, status=503)
    return web.json_response({"status": "ready", "workers": len(fleet.ctx.workers)})


@routes.route(
    "GET",
    "/metrics",
    summary="Prometheus metrics",
    tags=["ops"],
    content_type="text/plain",
)
async def metrics(request: web.Request) -> web.StreamResponse:
    registry = request.app[keys.METRICS]
    fleet = request.app.get(keys.FLEET)
    if fleet is not None:
        counts: dict[str, int] = {}
        for worker in fleet.ctx.workers.values():
            counts[worker.state] = counts.get(worker.state, 0) + 1
        registry.set_worker_counts(counts)
        registry.workers_quarantined.set(
            sum(1 for w in fleet.ctx.workers.values() if w.quarantined)
        )
        jobs = fleet.ctx.jobs.values()
        registry.queue_depth.set(sum(1 for j in jobs if j.state == JobState.PENDING))
        registry.jobs_running.set(
            sum(1 for j in jobs if j.state in (JobState.DISPATCHED, JobState.RUNNING))
        )
    body, content_type = registry.render()
    return web.Response(body=body, headers={"Content-Type": content_type})


def _audit_view(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "at": iso(row.at),
        "kind": row.kind,
        "actor": row.actor,
        "client_address": row.client_address,
        "target": row.target,
        "outcome": row.outcome,
        "detail": row.detail,
        "prev_hash": row.prev_hash,
        "hash": row.hash,
    }


@routes.route(
    "GET",
    "/api/audit",
    summary="Audit events, newest first, with filters",
    query=AuditListQuery,
    response=AuditListResponse,
    auth="api:audit.read",
)
async def list_audit(request: web.Request) -> web.StreamResponse:
    query = parse_query(request, AuditListQuery)
    filters = query.model_dump(exclude={"limit", "offset"})
    rows = await request.app[keys.STORE].list_audit(
        **filters, limit=query.limit + 1, offset=query.offset
    )
    events = [_audit_view(r) for r in rows[: query.limit]]
    total = query.offset + len(rows)
    return web.json_response(
        {"events": events, "total": total, "limit": query.limit, "offset": query.offset}
    )


@routes.route(
    "GET",
    "/api/audit/verify",
    summary="Verify the audit hash chain",
    response=AuditVerifyResponse,
    auth="api:audit.read",
)
async def verify_audit(request: web.Request) -> web.StreamResponse:
    ok, first_bad = await request.app[keys.STORE].verify_audit()
    return web.json_response({"ok": ok, "first_bad_id": first_bad})


@routes.route(
    "GET",
    "/api/configs",
    summary="Training configurations that can be submitted by name",
    auth="api",
)
async def list_configs(request: web.Request) -> web.StreamResponse:
    entries = await asyncio.to_thread(request.app[keys.CATALOG].names)
    configs = [
        {"name": e.name, "format": e.format, "modified_at": iso(e.modified_at)} for e in entries
    ]
    return web.json_response({"configs": configs, "total": len(configs)})


@routes.route(
    "GET",
    "/api/events",
    summary="Live feed of worker and job changes (Server-Sent Events), for pages",
    auth="api",
    content_type="text/event-stream",
)
async def events(request: web.Request) -> web.StreamResponse:
    return await stream_events(request)
