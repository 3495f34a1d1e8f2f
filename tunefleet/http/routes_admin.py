"""Admin endpoints: workers (create, list, drain, resume, rotate, delete) and API tokens."""

from __future__ import annotations

import shlex
from typing import Any

from aiohttp import web

from tunefleet.audit import AuditKind
from tunefleet.http import keys
from tunefleet.http.auth import ADMIN_USERS, ALL_PERMISSIONS, check_grantable, require_api
from tunefleet.http.body import parse_body, parse_query
from tunefleet.http.errors import ApiError
from tunefleet.http.principal_streams import PRINCIPAL_STREAMS_KEY, api_token_owner
from tunefleet.http.roles import beyond_ceiling, user_ceiling
from tunefleet.http.route_table import actor_name, fleet_of, principal_of, routes
from tunefleet.http.schemas_admin import (
    ApiTokenCreated,
    ApiTokenListResponse,
    CreateApiTokenRequest,
    CreateWorkerQuery,
    CreateWorkerRequest,
    CreateWorkerResponse,
    DeleteWorkerQuery,
    DeleteWorkerResponse,
    QuarantineRequest,
    QuarantineResponse,
    RevokeApiTokenResponse,
    RotateTokenResponse,
    WhoamiResponse,
    WorkerActionResponse,
    WorkerListQuery,
    WorkerListResponse,
    WorkerSummary,
)
from tunefleet.http.tokens import hash_token, new_api_token, new_worker_token

_NOT_FOUND = {404: "Worker not found"}


def orchestrator_url(request: web.Request) -> str:
    """The address a worker should use, as this request reached us."""
    forwarded = request.headers.get("X-Forwarded-Host")
    host = forwarded or request.host
    return f"{request.scheme}://{host}"


def connection_help(
    request: web.Request, name: str, worker_type: str, token: str
) -> dict[str, Any]:
    url = orchestrator_url(request)
    parts = ["tunefleet", "worker", "--orchestrator-url", url, "--worker-token", token]
    parts += ["--name", name]
    if worker_type == "persistent":
        parts.append("--persistent")
    trust = request.app[keys.OPTIONS].trust_cert if keys.OPTIONS in request.app else None
    if trust is not None:
        # The orchestrator's own path: the file is copied to the worker machine there.
        parts += ["--ca-cert", str(trust)]
    environment = {
        "SIMPLETUNER_ORCHESTRATOR_URL": url,
        "SIMPLETUNER_WORKER_TOKEN": token,
        "SIMPLETUNER_WORKER_NAME": name,
    }
    if worker_type == "persistent":
        environment["SIMPLETUNER_WORKER_PERSISTENT"] = "true"
    if trust is not None:
        environment["TUNEFLEET_CA_CERT"] = str(trust)
    return {"connection_command": shlex.join(parts), "environment": environment}


@routes.route(
    "GET",
    "/api/admin/workers",
    summary="List workers",
    query=WorkerListQuery,
    response=WorkerListResponse,
    auth="api:admin.workers",
)
async def list_workers(request: web.Request) -> web.StreamResponse:
    query = parse_query(request, WorkerListQuery)
    workers = await fleet_of(request).list_workers(query.status)
    return web.json_response({"workers": workers, "total": len(workers)})


@routes.route(
    "GET",
    "/api/admin/workers/{worker_id}",
    summary="One worker",
    response=WorkerSummary,
    auth="api:admin.workers",
    errors=_NOT_FOUND,
)
async def get_worker(request: web.Request) -> web.StreamResponse:
    return web.json_response(await fleet_of(request).get_worker(request.match_info["worker_id"]))


@routes.route(
    "POST",
    "/api/admin/workers",
    summary="Create a worker and its token (the token is shown only in this response)",
    request=CreateWorkerRequest,
    query=CreateWorkerQuery,
    response=CreateWorkerResponse,
    auth="api:admin.workers",
    errors={409: "A worker of this name exists (send ?allow_duplicate=true)"},
)
async def create_worker(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, CreateWorkerRequest)
    query = parse_query(request, CreateWorkerQuery)
    token = new_worker_token()
    worker = await fleet_of(request).create_worker(
        body.name,
        body.worker_type,
        dict(body.labels),
        hash_token(token),
        actor_name(request),
        allow_duplicate=query.allow_duplicate,
    )
    return web.json_response(
        {
            "worker_id": worker["worker_id"],
            "token": token,
            "name": body.name,
            "worker_type": body.worker_type,
            "labels": dict(body.labels),
            **connection_help(request, body.name, body.worker_type, token),
        }
    )


@routes.route(
    "POST",
    "/api/admin/workers/{worker_id}/drain",
    summary="Drain: finish the current job, take no more",
    response=WorkerActionResponse,
    auth="api:admin.workers",
    errors=_NOT_FOUND,
)
async def drain_worker(request: web.Request) -> web.StreamResponse:
    worker_id = request.match_info["worker_id"]
    snapshot = await fleet_of(request).drain(worker_id, actor_name(request))
    return web.json_response(
        {"success": True, "worker_id": worker_id, "status": snapshot["status"]}
    )


@routes.route(
    "POST",
    "/api/admin/workers/{worker_id}/resume",
    summary="Undo a drain",
    response=WorkerActionResponse,
    auth="api:admin.workers",
    errors={**_NOT_FOUND, 409: "The worker is not draining"},
)
async def resume_worker(request: web.Request) -> web.StreamResponse:
    worker_id = request.match_info["worker_id"]
    snapshot = await fleet_of(request).resume(worker_id, actor_name(request))
    return web.json_response(
        {"success": True, "worker_id": worker_id, "status": snapshot["status"]}
    )


@routes.route(
    "POST",
    "/api/admin/workers/{worker_id}/quarantine",
    summary="Quarantine: take no new job (a bad machine); the current job finishes",
    request=QuarantineRequest,
    response=QuarantineResponse,
    auth="api:admin.workers",
    errors={**_NOT_FOUND, 409: "The worker is already quarantined"},
)
async def quarantine_worker(request: web.Request) -> web.StreamResponse:
    worker_id = request.match_info["worker_id"]
    body = await parse_body(request, QuarantineRequest)
    actor = actor_name(request)
    reason = body.reason or f"quarantined by {actor}"
    snapshot = await fleet_of(request).quarantine(worker_id, reason, actor)
    return web.json_response(_quarantine_answer(worker_id, snapshot))


@routes.route(
    "POST",
    "/api/admin/workers/{worker_id}/release",
    summary="Release a quarantine: the worker takes jobs again",
    response=QuarantineResponse,
    auth="api:admin.workers",
    errors={**_NOT_FOUND, 409: "The worker is not quarantined"},
)
async def release_worker(request: web.Request) -> web.StreamResponse:
    worker_id = request.match_info["worker_id"]
    snapshot = await fleet_of(request).release_quarantine(worker_id, actor_name(request))
    return web.json_response(_quarantine_answer(worker_id, snapshot))


def _quarantine_answer(worker_id: str, snapshot: dict[str, Any]) -> dict[str, Any]:
    return {
        "success": True,
        "worker_id": worker_id,
        "status": snapshot["status"],
        "quarantined": snapshot["quarantined"],
        "quarantine_reason": snapshot["quarantine_reason"],
    }


@routes.route(
    "POST",
    "/api/admin/workers/{worker_id}/token",
    summary="Rotate the worker's token; the old one stops working at once",
    response=RotateTokenResponse,
    auth="api:admin.workers",
    errors={**_NOT_FOUND, 409: "The built-in local worker has no token"},
)
async def rotate_worker_token(request: web.Request) -> web.StreamResponse:
    worker_id = request.match_info["worker_id"]
    fleet = fleet_of(request)
    worker = fleet.worker(worker_id)
    token = new_worker_token()
    await fleet.rotate_token(worker_id, hash_token(token), actor_name(request))
    help_ = connection_help(request, worker.rec.name, worker.rec.worker_type, token)
    return web.json_response({"worker_id": worker_id, "token": token, **help_})


@routes.route(
    "DELETE",
    "/api/admin/workers/{worker_id}",
    summary="Delete a worker (only when offline, unless ?force=true)",
    query=DeleteWorkerQuery,
    response=DeleteWorkerResponse,
    auth="api:admin.workers",
    errors={
        **_NOT_FOUND,
        409: "The worker is not offline; the detail says how to delete it (often ?force=true)",
    },
)
async def delete_worker(request: web.Request) -> web.StreamResponse:
    query = parse_query(request, DeleteWorkerQuery)
    worker_id = request.match_info["worker_id"]
    requeued = await fleet_of(request).delete_worker(worker_id, query.force, actor_name(request))
    return web.json_response({"success": True, "worker_id": worker_id, "requeued_job_id": requeued})


# --- API tokens ---------------------------------------------------------------------------


def _token_view(row: Any, user: str | None) -> dict[str, Any]:
    from tunefleet.actors.records import iso

    return {
        "id": str(row.id),
        "name": row.name,
        "user": user,
        "permissions": list(row.permissions),
        "created_at": iso(row.created_at),
        "last_used_at": iso(row.last_used_at),
        "revoked_at": iso(row.revoked_at),
    }


@routes.route(
    "POST",
    "/api/admin/tokens",
    summary="Create an API token (shown only in this response)",
    request=CreateApiTokenRequest,
    response=ApiTokenCreated,
    auth="api:admin.workers",
    errors={
        403: "More than the user's role allows, more than this token holds, or another "
        "user's token without admin.users",
        404: "Unknown user",
        409: "The user is disabled",
    },
)
async def create_api_token(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, CreateApiTokenRequest)
    principal = principal_of(request)
    owner = body.user or principal.user
    if owner != principal.user:
        await require_api(request, ADMIN_USERS, needed_for=f"a token of user {owner}")
    store = request.app[keys.STORE]
    user = await store.users.user(owner)
    if user is None:
        raise ApiError(404, f"unknown user: {owner}; list users with GET /api/admin/users")
    if user.disabled:
        raise ApiError(409, f"user {owner} is disabled; enable them first (tunefleet users enable)")
    ceiling = user_ceiling(user.role, user.grants)
    permissions = (
        body.permissions
        if body.permissions is not None
        else [p for p in ALL_PERMISSIONS if p in ceiling]
    )
    beyond = beyond_ceiling(user.role, user.grants, permissions)
    if beyond:
        raise ApiError(
            403,
            f"Permission denied: user {owner}'s role {user.role} does not include "
            f"{', '.join(beyond)}; ask for fewer permissions or change the role",
        )
    check_grantable(principal, permissions)
    token = new_api_token()
    row = await store.create_api_token(
        name=body.name, token_hash=hash_token(token), permissions=permissions, user_id=user.id
    )
    await request.app[keys.AUDIT].record(
        AuditKind.API_TOKEN_CREATED,
        actor=actor_name(request),
        target=f"api_token:{row.id}",
        name=body.name,
        user=owner,
        permissions=permissions,
    )
    return web.json_response({**_token_view(row, owner), "token": token})


@routes.route(
    "GET",
    "/api/admin/tokens",
    summary="List API tokens (never the tokens themselves)",
    response=ApiTokenListResponse,
    auth="api:admin.workers",
)
async def list_api_tokens(request: web.Request) -> web.StreamResponse:
    store = request.app[keys.STORE]
    rows = await store.list_api_tokens(include_revoked=True)
    names = {user.id: user.name for user in await store.users.users()}
    tokens = [_token_view(row, names.get(row.user_id or 0)) for row in rows]
    return web.json_response({"tokens": tokens, "total": len(tokens)})


@routes.route(
    "DELETE",
    "/api/admin/tokens/{token_id}",
    summary="Revoke an API token",
    response=RevokeApiTokenResponse,
    auth="api:admin.workers",
    errors={404: "Token not found"},
)
async def revoke_api_token(request: web.Request) -> web.StreamResponse:
    raw = request.match_info["token_id"]
    # ASCII digits only ("²" passes isdigit but not int()), and no more than a 64-bit
    # database id can hold: anything else names no token.
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise ApiError(404, f"API token not found: {raw}; list them with GET /api/admin/tokens")
    store = request.app[keys.STORE]
    if not await store.revoke_api_token(int(raw)):
        raise ApiError(404, f"API token not found or already revoked: {raw}")
    # Its open streams end now, before anything else is written to them.
    request.app[PRINCIPAL_STREAMS_KEY].end(api_token_owner(str(int(raw))))
    await request.app[keys.AUDIT].record(
        AuditKind.API_TOKEN_REVOKED, actor=actor_name(request), target=f"api_token:{raw}"
    )
    return web.json_response({"success": True, "id": raw})


@routes.route(
    "GET",
    "/api/auth/whoami",
    summary="The calling API token: its name and what it may do",
    response=WhoamiResponse,
    auth="api",
)
async def whoami(request: web.Request) -> web.StreamResponse:
    principal = principal_of(request)
    # In the documented order, so clients can show them as they are listed.
    permissions = [p for p in ALL_PERMISSIONS if principal.has(p)]
    return web.json_response(
        {
            "kind": "api",
            "id": principal.token_id,
            "name": principal.name,
            "permissions": permissions,
            "user": principal.user,
            "role": principal.role,
            "teams": sorted(principal.teams),
            "default_team": principal.default_team,
        }
    )
