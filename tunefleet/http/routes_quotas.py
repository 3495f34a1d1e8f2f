"""Team GPU quotas (issue 25): `POST` and `DELETE /api/admin/teams/{name}/quota`.

A team's quota needs admin.users, as its concurrency limits do (teams are managed there).
Stored first, then told to the scheduler: the next pass orders and reclaims by it.
Accepted with a warning: a flavor no worker matches now, quotas adding up past the fleet.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tunefleet.actors.fair_share import NO_QUOTA, TeamQuota, quota_view, quota_warnings
from tunefleet.audit import AuditKind
from tunefleet.http import keys
from tunefleet.http.body import parse_body
from tunefleet.http.errors import ApiError
from tunefleet.http.route_table import actor_name, existing_team, fleet_of, routes
from tunefleet.http.schemas_quotas import TeamQuotaRequest, TeamQuotaResponse


def _quota(current: TeamQuota, body: TeamQuotaRequest) -> TeamQuota:
    given = body.model_fields_set
    flavors = (body.flavors or {}) if "flavors" in given else current.flavors
    bad = [glob for glob, count in flavors.items() if count < 0 or not glob.strip()]
    if bad:
        raise ApiError(
            400,
            f"flavor {bad[0]!r} needs a gpu_name glob and 0 or more GPUs; "
            'send e.g. {"flavors": {"*A100*": 8}}',
        )
    return TeamQuota(
        gpus=body.gpus if "gpus" in given else current.gpus,
        flavors=flavors,
        weight=(body.weight or 1.0) if "weight" in given else current.weight,
        borrow_limit=body.borrow_limit if "borrow_limit" in given else current.borrow_limit,
    )


@routes.route(
    "POST",
    "/api/admin/teams/{name}/quota",
    summary="Set a team's GPU quota (in all, per flavor glob), fair-share weight, borrow limit",
    request=TeamQuotaRequest,
    response=TeamQuotaResponse,
    auth="api:admin.users",
    errors={404: "Unknown team (the detail names it)"},
)
async def set_team_quota(request: web.Request) -> web.StreamResponse:
    name = await existing_team(request)
    store = request.app[keys.STORE]
    body = await parse_body(request, TeamQuotaRequest)
    quotas = await store.limits.quotas()
    quota = _quota(quotas.get(name, NO_QUOTA), body)
    quotas = await store.limits.set_quota(name, quota)
    fleet = fleet_of(request)
    await fleet.set_quotas(quotas)
    views = fleet.ctx.scheduler.fleet.values()
    warnings = quota_warnings(name, quota, quotas, [(v.gpu_name, v.gpu_count) for v in views])
    await request.app[keys.AUDIT].record(
        AuditKind.TEAM_QUOTA_SET,
        actor=actor_name(request),
        target=f"team:{name}",
        **quota_view(quota),
    )
    answer: dict[str, Any] = {"team": name, "quota": quota_view(quota), "warnings": warnings}
    return web.json_response(answer)


@routes.route(
    "DELETE",
    "/api/admin/teams/{name}/quota",
    summary="Clear a team's quota: no nominal GPUs, weight 1, borrowing unlimited",
    response=TeamQuotaResponse,
    auth="api:admin.users",
    errors={404: "Unknown team (the detail names it)"},
)
async def clear_team_quota(request: web.Request) -> web.StreamResponse:
    name = await existing_team(request)
    store = request.app[keys.STORE]
    quotas = await store.limits.set_quota(name, NO_QUOTA)
    await fleet_of(request).set_quotas(quotas)
    await request.app[keys.AUDIT].record(
        AuditKind.TEAM_QUOTA_CLEARED, actor=actor_name(request), target=f"team:{name}"
    )
    return web.json_response({"team": name, "quota": quota_view(NO_QUOTA), "warnings": []})
