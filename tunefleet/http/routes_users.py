"""Admin endpoints for users and teams: create, list, show, disable, enable, set a role;
teams and their members. Every change is audited; the last enabled admin is kept."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tunefleet.actors.records import iso
from tunefleet.audit import AuditKind
from tunefleet.http import keys
from tunefleet.http.auth import ALL_PERMISSIONS
from tunefleet.http.body import parse_body
from tunefleet.http.errors import ApiError
from tunefleet.http.principal_streams import PRINCIPAL_STREAMS_KEY, user_owner
from tunefleet.http.roles import ADMIN, user_ceiling
from tunefleet.http.route_table import actor_name, existing_team, routes
from tunefleet.http.schemas_users import (
    AddMemberRequest,
    CreateTeamRequest,
    CreateUserRequest,
    RemoveMemberResponse,
    SetRoleRequest,
    TeamListResponse,
    TeamView,
    UserListResponse,
    UserView,
)
from tunefleet.http.sessions import revoke_sessions
from tunefleet.storage.rows import TeamRow, UserRow
from tunefleet.storage.store import Store
from tunefleet.storage.store_users import Membership, unknown_team, unknown_user

_AUTH = "api:admin.users"
_USER_404 = {404: "Unknown user (the detail names it)"}
_TEAM_404 = {404: "Unknown team or user (the detail names it)"}
_LAST_ADMIN = {409: "The last enabled admin cannot be disabled or given another role"}


def user_view(row: UserRow, teams: list[Membership]) -> dict[str, Any]:
    ceiling = user_ceiling(row.role, row.grants)
    return {
        "name": row.name,
        "role": row.role,
        "grants": list(row.grants),
        "permissions": [p for p in ALL_PERMISSIONS if p in ceiling],
        "disabled": row.disabled,
        "teams": [{"name": m.team, "default": m.is_default} for m in teams],
        "default_team": next((m.team for m in teams if m.is_default), None),
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }


def team_view(row: TeamRow, members: list[Membership]) -> dict[str, Any]:
    return {
        "name": row.name,
        "members": [{"user": m.user, "default": m.is_default} for m in members],
        "created_at": iso(row.created_at),
    }


def _store(request: web.Request) -> Store:
    return request.app[keys.STORE]


async def _user_response(store: Store, row: UserRow) -> web.Response:
    teams = await store.users.memberships(user=row.name)
    return web.json_response(user_view(row, teams))


def _end_streams(request: web.Request, row: UserRow) -> None:
    """End every stream the user's tokens hold open: what each sends was decided from
    what the user could see and do when it opened (http/principal_streams.py). Called
    once the store has committed the change, so a reconnect meets the new state."""
    streams = request.app.get(PRINCIPAL_STREAMS_KEY)
    if streams is not None:
        streams.end(user_owner(row.id))


def _end_sessions(request: web.Request, row: UserRow) -> None:
    """A disabled user's web sessions end now: an open page returns to sign-in."""
    revoke_sessions(request.app, row.id)


def _narrowed(before: UserRow, after: UserRow) -> bool:
    """Whether the user may now do or see less than before (a lower role, a grant taken
    back, no longer an admin, who sees every job)."""
    if before.role == ADMIN and after.role != ADMIN:
        return True
    return not user_ceiling(after.role, after.grants) >= user_ceiling(before.role, before.grants)


async def _audit(request: web.Request, kind: AuditKind, target: str, **detail: Any) -> None:
    await request.app[keys.AUDIT].record(kind, actor=actor_name(request), target=target, **detail)


# --- users ------------------------------------------------------------------------------


@routes.route(
    "GET",
    "/api/admin/users",
    summary="List users with their roles and teams",
    response=UserListResponse,
    auth=_AUTH,
)
async def list_users(request: web.Request) -> web.StreamResponse:
    store = _store(request)
    rows = await store.users.users()
    every = await store.users.memberships()
    users = [user_view(row, [m for m in every if m.user == row.name]) for row in rows]
    return web.json_response({"users": users, "total": len(users)})


@routes.route(
    "POST",
    "/api/admin/users",
    summary="Create a user with a role, in teams (the first is their default)",
    request=CreateUserRequest,
    response=UserView,
    auth=_AUTH,
    errors={404: "A team named does not exist", 409: "A user of this name exists"},
)
async def create_user(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, CreateUserRequest)
    store = _store(request)
    row = await store.users.create_user(
        body.name, role=body.role, grants=body.grants, teams=body.teams
    )
    await _audit(
        request,
        AuditKind.USER_CREATED,
        f"user:{body.name}",
        role=body.role,
        teams=",".join(body.teams),
        grants=",".join(body.grants),
    )
    return await _user_response(store, row)


@routes.route(
    "GET",
    "/api/admin/users/{name}",
    summary="One user: role, grants, what their tokens may hold, teams",
    response=UserView,
    auth=_AUTH,
    errors=_USER_404,
)
async def show_user(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    store = _store(request)
    row = await store.users.user(name)
    if row is None:
        raise unknown_user(name)
    return await _user_response(store, row)


@routes.route(
    "POST",
    "/api/admin/users/{name}/disable",
    summary="Disable a user: their tokens stop working (401) and their open streams end",
    response=UserView,
    auth=_AUTH,
    errors={**_USER_404, **_LAST_ADMIN},
)
async def disable_user(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    store = _store(request)
    row = await store.users.set_disabled(name, True)
    _end_sessions(request, row)
    _end_streams(request, row)
    await _audit(request, AuditKind.USER_DISABLED, f"user:{name}")
    return await _user_response(store, row)


@routes.route(
    "POST",
    "/api/admin/users/{name}/enable",
    summary="Enable a disabled user: their tokens work again",
    response=UserView,
    auth=_AUTH,
    errors=_USER_404,
)
async def enable_user(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    store = _store(request)
    row = await store.users.set_disabled(name, False)
    await _audit(request, AuditKind.USER_ENABLED, f"user:{name}")
    return await _user_response(store, row)


@routes.route(
    "POST",
    "/api/admin/users/{name}/role",
    summary="Set a user's role (and separate grants); their tokens follow at once",
    request=SetRoleRequest,
    response=UserView,
    auth=_AUTH,
    errors={**_USER_404, **_LAST_ADMIN},
)
async def set_user_role(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    store = _store(request)
    before = await store.users.user(name)
    if before is None:  # before the body: the name is what to fix
        raise unknown_user(name)
    body = await parse_body(request, SetRoleRequest)
    row = await store.users.set_role(name, body.role, body.grants)
    if _narrowed(before, row):
        _end_streams(request, row)
    detail: dict[str, Any] = {"role": body.role}
    if body.grants is not None:
        detail["grants"] = ",".join(body.grants)
    await _audit(request, AuditKind.USER_ROLE_SET, f"user:{name}", **detail)
    return await _user_response(store, row)


# --- teams ------------------------------------------------------------------------------


@routes.route(
    "GET",
    "/api/admin/teams",
    summary="List teams with their members",
    response=TeamListResponse,
    auth=_AUTH,
)
async def list_teams(request: web.Request) -> web.StreamResponse:
    store = _store(request)
    rows = await store.users.teams()
    every = await store.users.memberships()
    teams = [team_view(row, [m for m in every if m.team == row.name]) for row in rows]
    return web.json_response({"teams": teams, "total": len(teams)})


@routes.route(
    "POST",
    "/api/admin/teams",
    summary="Create a team",
    request=CreateTeamRequest,
    response=TeamView,
    auth=_AUTH,
    errors={409: "A team of this name exists"},
)
async def create_team(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, CreateTeamRequest)
    row = await _store(request).users.create_team(body.name)
    await _audit(request, AuditKind.TEAM_CREATED, f"team:{body.name}")
    return web.json_response(team_view(row, []))


async def _team_response(store: Store, name: str) -> web.Response:
    row = await store.users.team(name)
    if row is None:
        raise unknown_team(name)
    return web.json_response(team_view(row, await store.users.memberships(team=name)))


@routes.route(
    "GET",
    "/api/admin/teams/{name}",
    summary="One team and its members",
    response=TeamView,
    auth=_AUTH,
    errors=_TEAM_404,
)
async def show_team(request: web.Request) -> web.StreamResponse:
    return await _team_response(_store(request), request.match_info["name"])


@routes.route(
    "POST",
    "/api/admin/teams/{name}/members",
    summary="Add a user to a team (optionally as their default team)",
    request=AddMemberRequest,
    response=TeamView,
    auth=_AUTH,
    errors=_TEAM_404,
)
async def add_team_member(request: web.Request) -> web.StreamResponse:
    name = await existing_team(request)
    store = _store(request)
    body = await parse_body(request, AddMemberRequest)
    await store.users.add_member(name, body.user, default=body.default)
    await _audit(
        request, AuditKind.TEAM_MEMBER_ADDED, f"team:{name}", user=body.user, default=body.default
    )
    return await _team_response(store, name)


@routes.route(
    "DELETE",
    "/api/admin/teams/{name}/members/{user}",
    summary="Take a user out of a team (their oldest other team becomes the default)",
    response=RemoveMemberResponse,
    auth=_AUTH,
    errors={404: "Unknown team or user, or the user is not in the team"},
)
async def remove_team_member(request: web.Request) -> web.StreamResponse:
    name, user = request.match_info["name"], request.match_info["user"]
    store = _store(request)
    if not await store.users.remove_member(name, user):
        raise unknown_member(name, user)
    row = await store.users.user(user)
    if row is not None:  # the team's jobs are no longer theirs to see
        _end_streams(request, row)
    await _audit(request, AuditKind.TEAM_MEMBER_REMOVED, f"team:{name}", user=user)
    return web.json_response({"success": True, "team": name, "user": user})


def unknown_member(team: str, user: str) -> ApiError:
    return ApiError(404, f"user {user} is not in team {team}; see GET /api/admin/teams/{team}")
