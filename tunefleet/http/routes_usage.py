"""GPU usage per user or team per UTC day (JSON and CSV), and teams' GPU-hour budgets.

Who sees what: an admin every attempt; a holder of `usage.read` (a lead) their teams'
attempts and their own; anyone else their own attempts only. `?user=` and `?team=`
narrow that further, never widen it. Budgets are shown for the teams the caller belongs
to (an admin: all of them): they decide whether the caller's next submit goes through.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tunefleet.actors.records import iso
from tunefleet.audit import AuditKind
from tunefleet.csv_cells import safe_row
from tunefleet.http import keys
from tunefleet.http.auth import USAGE_READ, ApiPrincipal, controls_orchestrator
from tunefleet.http.body import parse_body, parse_query
from tunefleet.http.budget_check import standing_view, team_standing
from tunefleet.http.errors import ApiError
from tunefleet.http.route_table import actor_name, existing_team, principal_of, routes
from tunefleet.http.schemas_usage import (
    SetBudgetRequest,
    TeamBudgetResponse,
    UsageQuery,
    UsageResponse,
)
from tunefleet.storage.store import Store
from tunefleet.usage import AttemptSpan, UsageRow, roll_up

CSV = "text/csv"
DEFAULT_WINDOW = dt.timedelta(days=30)
MAX_WINDOW = dt.timedelta(days=400)
_ADMIN_AUTH = "api:admin.users"


def _epoch(value: dt.datetime) -> float:
    """A naive time is UTC (the API speaks UTC throughout)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def usage_window(query: UsageQuery, now: float) -> tuple[float, float]:
    until = _epoch(query.until) if query.until is not None else now
    if query.since is not None:
        since = _epoch(query.since)
    else:
        start = dt.datetime.fromtimestamp(until, dt.UTC) - DEFAULT_WINDOW
        since = _epoch(dt.datetime(start.year, start.month, start.day, tzinfo=dt.UTC))
    if since >= until:
        raise ApiError(400, f"since ({iso(since)}) must be before until ({iso(until)})")
    if until - since > MAX_WINDOW.total_seconds():
        raise ApiError(
            400, f"the window is longer than {MAX_WINDOW.days} days; ask for a shorter one"
        )
    return since, until


def usage_scope(principal: ApiPrincipal) -> Callable[[AttemptSpan], bool]:
    """Which attempts the principal may count (see the module's docstring)."""
    if controls_orchestrator(principal):
        return lambda span: True
    if principal.has(USAGE_READ):
        return lambda span: span.user == principal.user or span.team in principal.teams
    return lambda span: span.user == principal.user


async def _check_filters(store: Store, query: UsageQuery) -> None:
    if query.user is not None and await store.users.user(query.user) is None:
        raise ApiError(404, f"unknown user: {query.user}; leave out ?user= for everyone's")
    if query.team is not None and await store.users.team(query.team) is None:
        raise ApiError(404, f"unknown team: {query.team}; leave out ?team= for every team's")


@routes.route(
    "GET",
    "/api/usage",
    summary="GPU-seconds per user or team per UTC day (?format=csv or Accept: text/csv)",
    query=UsageQuery,
    response=UsageResponse,
    auth="api",
    errors={400: "A bad window (since not before until, or too long)", 404: "Unknown filter"},
    also_content=(CSV,),
)
async def get_usage(request: web.Request) -> web.StreamResponse:
    query = parse_query(request, UsageQuery)
    store = request.app[keys.STORE]
    now = request.app[keys.CLOCK].time()
    since, until = usage_window(query, now)
    await _check_filters(store, query)
    scope = usage_scope(principal_of(request))
    spans = [
        span
        for span in await store.usage.attempt_spans(since, until)
        if scope(span)
        and (query.user is None or span.user == query.user)
        and (query.team is None or span.team == query.team)
    ]
    rows = roll_up(spans, query.by, now, since, until)
    if query.format == "csv" or _wants_csv(request):
        return _csv_response(rows, query.by, since, until)
    return web.json_response(
        {
            "by": query.by,
            "since": iso(since),
            "until": iso(until),
            "rows": [_row_view(row) for row in rows],
            "totals": _totals(rows),
            "total_gpu_seconds": sum(row.gpu_ms for row in rows) / 1000,
            "budgets": await _budgets(store, principal_of(request), now),
        }
    )


def _wants_csv(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    return CSV in accept and "application/json" not in accept


def _row_view(row: UsageRow) -> dict[str, Any]:
    return {
        "day": row.day.isoformat(),
        "name": row.key,
        "gpu_seconds": row.gpu_seconds,
        "gpu_hours": round(row.gpu_ms / 3_600_000, 6),
        "attempts": row.attempts,
    }


def _totals(rows: list[UsageRow]) -> list[dict[str, Any]]:
    by_name: dict[str, int] = defaultdict(int)
    for row in rows:
        by_name[row.key] += row.gpu_ms
    return [
        {"name": name, "gpu_seconds": ms / 1000, "gpu_hours": round(ms / 3_600_000, 6)}
        for name, ms in sorted(by_name.items())
    ]


async def _budgets(store: Store, principal: ApiPrincipal, now: float) -> list[dict[str, Any]]:
    rows = await store.usage.budgets()
    if not controls_orchestrator(principal):
        rows = [row for row in rows if row.team_name in principal.teams]
    return [standing_view(await team_standing(store, row, now)) for row in rows]


def _csv_response(rows: list[UsageRow], by: str, since: float, until: float) -> web.Response:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["day", by, "gpu_seconds", "gpu_hours", "attempts"])
    for row in rows:
        view = _row_view(row)
        writer.writerow(
            safe_row(
                [view["day"], view["name"], view["gpu_seconds"], view["gpu_hours"], row.attempts]
            )
        )
    start = dt.datetime.fromtimestamp(since, dt.UTC).date().isoformat()
    end = dt.datetime.fromtimestamp(until, dt.UTC).date().isoformat()
    return web.Response(
        text=out.getvalue(),
        content_type=CSV,
        charset="utf-8",
        headers={"Content-Disposition": f'attachment; filename="usage-{by}-{start}-{end}.csv"'},
    )


# --- budgets ----------------------------------------------------------------------------


async def _budget_response(store: Store, team: str, now: float) -> web.Response:
    row = await store.usage.budget(team)
    view = standing_view(await team_standing(store, row, now)) if row is not None else None
    return web.json_response({"team": team, "budget": view})


@routes.route(
    "GET",
    "/api/admin/teams/{name}/budget",
    summary="The team's GPU-hour budget and where it stands now",
    response=TeamBudgetResponse,
    auth=_ADMIN_AUTH,
    errors={404: "Unknown team"},
)
async def show_budget(request: web.Request) -> web.StreamResponse:
    team = await existing_team(request)
    return await _budget_response(request.app[keys.STORE], team, request.app[keys.CLOCK].time())


@routes.route(
    "POST",
    "/api/admin/teams/{name}/budget",
    summary="Set the team's GPU-hour budget per day, week or month, action warn or block",
    request=SetBudgetRequest,
    response=TeamBudgetResponse,
    auth=_ADMIN_AUTH,
    errors={404: "Unknown team"},
)
async def set_budget(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, SetBudgetRequest)
    team = await existing_team(request)
    store = request.app[keys.STORE]
    await store.usage.set_budget(team, body.gpu_hours, body.period, body.action)
    await request.app[keys.AUDIT].record(
        AuditKind.TEAM_BUDGET_SET,
        actor=actor_name(request),
        target=f"team:{team}",
        gpu_hours=body.gpu_hours,
        period=body.period,
        action=body.action,
    )
    return await _budget_response(store, team, request.app[keys.CLOCK].time())


@routes.route(
    "DELETE",
    "/api/admin/teams/{name}/budget",
    summary="Remove the team's GPU-hour budget (its usage is no longer limited)",
    response=TeamBudgetResponse,
    auth=_ADMIN_AUTH,
    errors={404: "Unknown team, or a team without a budget"},
)
async def clear_budget(request: web.Request) -> web.StreamResponse:
    team = await existing_team(request)
    if not await request.app[keys.STORE].usage.clear_budget(team):
        raise ApiError(404, f"team {team} has no budget; set one with POST to this path")
    await request.app[keys.AUDIT].record(
        AuditKind.TEAM_BUDGET_CLEARED, actor=actor_name(request), target=f"team:{team}"
    )
    return web.json_response({"team": team, "budget": None})
