"""The one route table every HTTP adapter module declares its routes on."""

from __future__ import annotations

from aiohttp import hdrs, web
from multidict import CIMultiDict

from tunefleet.actors.fleet import Fleet
from tunefleet.disk_guard import DATABASE_BYTES_PER_BYTE
from tunefleet.http import keys
from tunefleet.http.auth import (
    API_PRINCIPAL_KEY,
    WORKER_PRINCIPAL_KEY,
    ApiPrincipal,
    report_auth_failure,
)
from tunefleet.http.errors import ApiError
from tunefleet.http.openapi import RouteTable
from tunefleet.storage.store_users import unknown_team

routes = RouteTable()
# The protocol's answer to a heartbeat or a status report, made once: json_response()
# serialises a dict and encodes the text on every call (2-3 us of each), and
# content_type= with charset= has the Response build and parse its header (1.4 us more
# than handing it over whole).
_SUCCESS_BODY = b'{"success": true}'
_SUCCESS_HEADERS = CIMultiDict({hdrs.CONTENT_TYPE: "application/json; charset=utf-8"})


def success_response() -> web.Response:
    """``{"success": true}``, as ``web.json_response({"success": True})`` writes it."""
    return web.Response(body=_SUCCESS_BODY, headers=_SUCCESS_HEADERS)


def check_disk(request: web.Request, what: str, *, stored_bytes: int | None = None) -> None:
    """507 when the disk is below the free-space floor (--min-free-disk): for new bulk
    data only (log lines, artifact bytes, new jobs), never for reads or heartbeats.
    ``stored_bytes``: what the write adds to the disk, counted against the room left; by
    default the body's, as database bytes."""
    guard = request.app.get(keys.DISK_GUARD)
    if guard is None:
        return
    if stored_bytes is None:
        stored_bytes = DATABASE_BYTES_PER_BYTE * (request.content_length or 0)
    guard.check(what, stored_bytes)


async def existing_team(request: web.Request) -> str:
    """The ``{name}`` of the path, a team that exists; 404 naming it otherwise (checked
    before any body is read: a wrong name is the first thing to fix)."""
    name = request.match_info["name"]
    if await request.app[keys.STORE].users.team(name) is None:
        raise unknown_team(name)
    return name


def fleet_of(request: web.Request) -> Fleet:
    fleet = request.app.get(keys.FLEET)
    if fleet is None:
        raise ApiError(503, "the orchestrator is starting; try again in a moment")
    return fleet


def worker_id_of(request: web.Request) -> str:
    return request[WORKER_PRINCIPAL_KEY].worker_id


def principal_of(request: web.Request) -> ApiPrincipal:
    return request[API_PRINCIPAL_KEY]


def actor_name(request: web.Request) -> str:
    """Who did it, for the audit trail: the API token's name and id, never the token."""
    principal = request[API_PRINCIPAL_KEY]
    return f"token:{principal.name}#{principal.token_id}"


async def check_worker_id(request: web.Request, claimed: str | None) -> str:
    """A request may name a worker only if it is the token's own (the protocol's 400).
    Naming another is one worker's token reaching for another's: audited."""
    own = worker_id_of(request)
    if claimed is not None and claimed != own:
        await report_auth_failure(request, "worker", f"worker {own} named worker {claimed[:64]}")
        raise ApiError(400, "Worker ID mismatch")
    return own


async def audit_foreign_job(request: web.Request, job_id: str) -> None:
    """Record a worker reporting on a job that is not its own (the caller then lets the
    403 go on)."""
    reason = f"worker {worker_id_of(request)} is not assigned to job {job_id}"
    await report_auth_failure(request, "worker", reason)
