"""Concurrency limits (issue 24), in SimpleTuner's spelling: `GET/POST
/api/queue/concurrency`, `POST /api/admin/teams/{name}/limits`, and `GET /api/queue/me`.

Changing the fleet's limits needs queue.admin (they govern the whole queue, as cancelling
anyone's job does); a team's needs admin.users (teams are managed there). Each change is
stored first, then told to the scheduler: a raised limit lets held jobs start at once, a
lowered one never stops a running job.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tunefleet.actors.queue_views import AWAITING_APPROVAL, job_line, limits_view, live_jobs
from tunefleet.actors.tenancy_limits import TeamLimits, team_limit_warning
from tunefleet.audit import AuditKind
from tunefleet.fsm.job import JobState
from tunefleet.http import keys
from tunefleet.http.body import parse_body
from tunefleet.http.route_table import actor_name, existing_team, fleet_of, principal_of, routes
from tunefleet.http.schemas_limits import (
    ConcurrencyRequest,
    ConcurrencyResponse,
    QueueMeResponse,
    TeamLimitsRequest,
    TeamLimitsResponse,
)


@routes.route(
    "GET",
    "/api/queue/concurrency",
    summary="The concurrency limits: max_concurrent, user_max_concurrent, per team",
    response=ConcurrencyResponse,
    auth="api",
)
async def get_concurrency(request: web.Request) -> web.StreamResponse:
    return web.json_response(limits_view(await request.app[keys.STORE].limits.limits()))


@routes.route(
    "POST",
    "/api/queue/concurrency",
    summary="Set max_concurrent and user_max_concurrent (0 or null: no limit)",
    request=ConcurrencyRequest,
    response=ConcurrencyResponse,
    auth="api:queue.admin",
)
async def set_concurrency(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, ConcurrencyRequest)
    store = request.app[keys.STORE]
    current = await store.limits.limits()
    given = body.model_fields_set
    limits = await store.limits.set_fleet_limits(
        body.max_concurrent if "max_concurrent" in given else current.max_concurrent,
        body.user_max_concurrent if "user_max_concurrent" in given else current.user_max_concurrent,
    )
    fleet_of(request).set_limits(limits)
    await request.app[keys.AUDIT].record(
        AuditKind.QUEUE_CONCURRENCY_SET,
        actor=actor_name(request),
        target="queue",
        max_concurrent=limits.max_concurrent,
        user_max_concurrent=limits.user_max_concurrent,
    )
    return web.json_response(limits_view(limits))


@routes.route(
    "POST",
    "/api/admin/teams/{name}/limits",
    summary="Set a team's max_jobs and max_gpus (0 or null: no limit)",
    request=TeamLimitsRequest,
    response=TeamLimitsResponse,
    auth="api:admin.users",
    errors={404: "Unknown team (the detail names it)"},
)
async def set_team_limits(request: web.Request) -> web.StreamResponse:
    name = await existing_team(request)
    store = request.app[keys.STORE]
    body = await parse_body(request, TeamLimitsRequest)
    current = (await store.limits.limits()).teams.get(name, TeamLimits())
    given = body.model_fields_set
    limits = await store.limits.set_team_limits(
        name,
        body.max_jobs if "max_jobs" in given else current.max_jobs,
        body.max_gpus if "max_gpus" in given else current.max_gpus,
    )
    fleet = fleet_of(request)
    fleet.set_limits(limits)
    team = limits.teams.get(name, TeamLimits())
    await request.app[keys.AUDIT].record(
        AuditKind.TEAM_LIMITS_SET,
        actor=actor_name(request),
        target=f"team:{name}",
        max_jobs=team.max_jobs,
        max_gpus=team.max_gpus,
    )
    return web.json_response(
        {
            "team": name,
            "max_jobs": team.max_jobs,
            "max_gpus": team.max_gpus,
            "warning": team_limit_warning(name, team, fleet.fleet_gpus()),
        }
    )


@routes.route(
    "GET",
    "/api/queue/me",
    summary="The caller's pending, running and awaiting-approval jobs and best position",
    response=QueueMeResponse,
    auth="api",
)
async def queue_me(request: web.Request) -> web.StreamResponse:
    user = principal_of(request).user
    fleet = fleet_of(request)
    mine = sorted(
        (job for job in live_jobs(fleet.ctx) if user is not None and job.user == user),
        key=lambda job: job.job_id,
    )
    pending = [job for job in mine if job.state == JobState.PENDING]
    running = [job for job in mine if job.state in (JobState.DISPATCHED, JobState.RUNNING)]
    waiting = [
        job for job in mine if AWAITING_APPROVAL is not None and job.state == AWAITING_APPROVAL
    ]
    positions = [(await fleet.position(job.job_id))["position"] for job in pending]
    known = [p for p in positions if p is not None]
    answer: dict[str, Any] = {
        "pending_count": len(pending),
        "running_count": len(running),
        "blocked_count": len(waiting),
        "best_position": min(known) if known else None,
        "pending_jobs": [job_line(job) for job in pending],
        "running_jobs": [job_line(job) for job in running],
        "awaiting_approval": [job_line(job) for job in waiting],
    }
    return web.json_response(answer)
