"""Queue endpoints: submit, list, one job, cancel, position, stats, logs."""

from __future__ import annotations

import asyncio
import shlex
from typing import Any

from aiohttp import web

from tunefleet.actors.matching import job_gpu_count_from_config
from tunefleet.actors.queue_views import counts_by, live_jobs
from tunefleet.actors.records import JobRecord
from tunefleet.commands import chooses_program
from tunefleet.fsm.job import JobState
from tunefleet.http import keys
from tunefleet.http.approval_access import approval_hold
from tunefleet.http.auth import QUEUE_COMMAND, require_api
from tunefleet.http.body import parse_body, parse_query
from tunefleet.http.budget_check import check_budget, note_budget_warning
from tunefleet.http.errors import ApiError
from tunefleet.http.job_access import (
    check_may_change,
    may_see,
    team_for_submit,
    viewer_of,
    visible_job,
)
from tunefleet.http.job_views import job_detail, job_summary, log_line_view
from tunefleet.http.local_target import decide_local
from tunefleet.http.route_table import actor_name, check_disk, fleet_of, principal_of, routes
from tunefleet.http.schemas_queue import (
    CancelJobRequest,
    CancelJobResponse,
    JobDetail,
    JobListQuery,
    JobListResponse,
    JobLogsQuery,
    JobLogsResponse,
    PositionResponse,
    QueueStatsResponse,
    SubmitJobRequest,
    SubmitJobResponse,
)
from tunefleet.http.sse_follow import follow_job_logs
from tunefleet.jobconfigs import ConfigNotFound, lift_command
from tunefleet.storage.store_base import JobOwner

# Another's job that the caller may not see is not found either (no existence leak).
_JOB_NOT_FOUND = {404: "Job not found"}


@routes.route(
    "POST",
    "/api/queue/submit",
    summary="Submit a training job",
    request=SubmitJobRequest,
    response=SubmitJobResponse,
    auth="api:queue.submit",
    errors={
        400: "Unknown config_name, invalid config, or a target this orchestrator lacks "
        "(or cannot run isolated for this submitter)",
        403: "Choosing the command needs queue.command; target local needs queue.local; "
        "team must be one of the submitter's; the team's block budget is spent",
        404: "Unknown team",
        507: "The orchestrator's disk is below its free-space floor; submit once it has room",
    },
)
async def submit_job(request: web.Request) -> web.StreamResponse:
    check_disk(request, "a new job")
    body = await parse_body(request, SubmitJobRequest)
    principal = principal_of(request)
    team = await team_for_submit(request, principal, body.team)
    fleet = fleet_of(request)
    settings = fleet.ctx.settings
    config, dataloader = await _resolve_config(request, body)
    config, lifted_command = lift_command(config)
    command = _command(body.command) if body.command is not None else lifted_command
    # A named configuration is the operator's: its tunefleet_command is not the
    # submitter's choice. An inline one's is, like `command` itself.
    chosen = command if body.command is not None or body.config is not None else None
    why = chooses_program(chosen, body.env)
    if why is not None:
        await require_api(request, QUEUE_COMMAND, needed_for=why)
    local = await decide_local(request, body.target, settings)
    gpu_count = body.gpu_count
    if gpu_count is None:
        gpu_count = job_gpu_count_from_config(config) or 0
    # Last of the checks, so a submit refused for its content does not learn the budget.
    over_budget = await check_budget(request, team)
    rec = JobRecord(
        job_id="",
        seq=0,
        state=JobState.PENDING,
        target=local.target,
        config=config,
        config_name=body.config_name,
        name=body.name or body.config_name,
        dataloader=dataloader,
        command=command,
        env=dict(body.env),
        worker_labels=dict(body.worker_labels),
        gpu_count=gpu_count,
        min_vram_gb=body.min_vram_gb,
        gpu_name=body.gpu_name,
        priority=body.priority,
        max_retries=(
            body.max_retries if body.max_retries is not None else settings.default_max_retries
        ),
        timeout_minutes=body.timeout_minutes,
        user_name=principal.user,
        team_name=team,
        local_unisolated=local.local_unisolated,
    )
    held = await approval_hold(request, principal, rec, fleet.ctx.clock.time())
    answer = await fleet.submit(rec, actor_name(request), held=held)
    if over_budget is not None and answer.get("job_id"):
        await note_budget_warning(request, answer["job_id"], over_budget, actor_name(request))
        answer["budget_warning"] = over_budget.message()
    return web.json_response(answer)


def _command(value: Any) -> list[str]:
    return shlex.split(value) if isinstance(value, str) else list(value)


async def _resolve_config(
    request: web.Request, body: SubmitJobRequest
) -> tuple[dict[str, Any], Any]:
    if body.config is not None:
        return dict(body.config), body.dataloader
    catalog = request.app[keys.CATALOG]
    name = body.config_name or ""
    try:
        config, dataloader = await asyncio.to_thread(catalog.load_with_dataloader, name)
    except ConfigNotFound as error:
        # An unknown name in a body is bad input, not a missing URL: 400, nothing queued.
        raise ApiError(400, str(error)) from None
    return config, body.dataloader if body.dataloader is not None else dataloader


@routes.route(
    "GET",
    "/api/queue",
    summary="List jobs, newest first, with filters and paging",
    query=JobListQuery,
    response=JobListResponse,
    auth="api",
    errors={404: "Unknown user or team in the filter"},
)
async def list_jobs(request: web.Request) -> web.StreamResponse:
    """Only the jobs the caller may see: their own and their teams' (an admin: all)."""
    query = parse_query(request, JobListQuery)
    store = request.app[keys.STORE]
    if query.user is not None and await store.users.user(query.user) is None:
        raise ApiError(404, f"unknown user: {query.user}; leave out ?user= to list every job")
    if query.team is not None and await store.users.team(query.team) is None:
        raise ApiError(404, f"unknown team: {query.team}; leave out ?team= to list every job")
    owner = JobOwner(query.user, query.team) if query.user or query.team else None
    filters: dict[str, Any] = {
        "state": query.status or None,
        "target": query.target,
        "worker_id": query.worker_id,
        "owner": owner,
        "visible_to": viewer_of(principal_of(request)),
    }
    rows = await store.list_jobs(**filters, limit=query.limit, offset=query.offset)
    total = await store.count_jobs(**filters)
    ids = [row.id for row in rows]
    apart = await store.count_attempts_apart(ids)
    jobs = [job_summary(r, apart.get(r.id)) for r in rows]
    return web.json_response(
        {"jobs": jobs, "total": total, "limit": query.limit, "offset": query.offset}
    )


@routes.route(
    "GET",
    "/api/queue/stats",
    summary="Queue depth, running jobs, average wait and worker pool counts",
    response=QueueStatsResponse,
    auth="api",
)
async def queue_stats(request: web.Request) -> web.StreamResponse:
    """SimpleTuner's fields and ours; by_user and by_team only name whom the caller may
    see (an admin: everyone)."""
    fleet = fleet_of(request)
    principal = principal_of(request)
    jobs = live_jobs(fleet.ctx)
    by_user = counts_by(jobs, "user")
    by_team = counts_by(jobs, "team")
    return web.json_response(
        {
            **await fleet.stats(),
            "max_concurrent": fleet.limits.max_concurrent,
            "user_max_concurrent": fleet.limits.user_max_concurrent,
            "by_user": {u: c for u, c in by_user.items() if may_see(principal, u, None)},
            "by_team": {t: c for t, c in by_team.items() if may_see(principal, None, t)},
            "fair_share": {
                t: v
                for t, v in (await fleet.quota_standings()).items()
                if may_see(principal, None, t)
            },
        }
    )


@routes.route(
    "GET",
    "/api/queue/position/{job_id}",
    summary="A pending job's place in the queue and why it waits",
    response=PositionResponse,
    auth="api",
    errors=_JOB_NOT_FOUND,
)
async def job_position(request: web.Request) -> web.StreamResponse:
    job_id = request.match_info["job_id"]
    await visible_job(request, job_id)
    return web.json_response(await fleet_of(request).position(job_id))


@routes.route(
    "GET",
    "/api/queue/{job_id}",
    summary="One job with its configuration, attempts and timeline",
    response=JobDetail,
    auth="api",
    errors=_JOB_NOT_FOUND,
)
async def get_job(request: web.Request) -> web.StreamResponse:
    job_id = request.match_info["job_id"]
    store = request.app[keys.STORE]
    row = await visible_job(request, job_id)
    attempts = await store.list_attempts(job_id)
    events = await store.list_job_events(job_id)
    detail = job_detail(row, attempts, events, request.app[keys.CLOCK].time())
    if row.state == JobState.PENDING_APPROVAL:
        detail["wait_reason"] = row.wait_reason
    if row.state == JobState.PENDING:
        position = await fleet_of(request).position(job_id)
        detail["queue_position"] = position["position"]
        detail["wait_reason"] = position["reason"] or row.wait_reason
    return web.json_response(detail)


@routes.route(
    "POST",
    "/api/queue/{job_id}/cancel",
    summary="Cancel a job: pending ones leave the queue, running ones are stopped",
    request=CancelJobRequest,
    response=CancelJobResponse,
    auth="api:queue.submit",
    errors={
        **_JOB_NOT_FOUND,
        403: "A researcher cancels their own jobs, a lead their team's, queue.admin any",
        409: "Ended",
    },
)
async def cancel_job(request: web.Request) -> web.StreamResponse:
    job_id = request.match_info["job_id"]
    row = await visible_job(request, job_id)  # before the body: a wrong id is the first fix
    body = await parse_body(request, CancelJobRequest)
    check_may_change(principal_of(request), row, "cancel")
    actor = actor_name(request)
    return web.json_response(await fleet_of(request).cancel(job_id, actor, body.reason))


@routes.route(
    "GET",
    "/api/queue/{job_id}/logs",
    summary="The job's output lines; ?follow=true streams new ones over SSE until it ends",
    query=JobLogsQuery,
    response=JobLogsResponse,
    auth="api",
    errors=_JOB_NOT_FOUND,
    also_streams=True,
)
async def job_logs(request: web.Request) -> web.StreamResponse:
    job_id = request.match_info["job_id"]
    follow = request.query.get("follow", "").lower() in ("1", "true", "yes")
    query = parse_query(request, JobLogsQuery)
    store = request.app[keys.STORE]
    await visible_job(request, job_id)
    if follow:
        return await follow_job_logs(request, job_id, query.from_seq)
    rows = await store.read_logs(
        job_id, after_id=max(0, query.from_seq - 1), limit=query.limit, attempt=query.attempt
    )
    if query.stream is not None:
        rows = [r for r in rows if r.stream == query.stream]
    lines = [log_line_view(r) for r in rows]
    next_seq = (rows[-1].id + 1) if rows else query.from_seq
    return web.json_response({"job_id": job_id, "lines": lines, "next_seq": next_seq})
