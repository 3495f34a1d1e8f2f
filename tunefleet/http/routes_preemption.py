"""Manual preemption: an admin stops a job's attempt so its worker can take other work;
the job goes back to the head of its priority band, spends no retry, and resumes from its
newest stored checkpoint (tunefleet/actors/preemption.py)."""

from __future__ import annotations

from aiohttp import web

from tunefleet.http.body import parse_body
from tunefleet.http.job_access import visible_job
from tunefleet.http.route_table import actor_name, fleet_of, routes
from tunefleet.http.schemas_preemption import PreemptJobRequest, PreemptJobResponse


@routes.route(
    "POST",
    "/api/jobs/{job_id}/preempt",
    summary="Preempt a running job: its trainer checkpoints and stops, and the job is "
    "requeued at the head of its priority band without spending a retry",
    request=PreemptJobRequest,
    response=PreemptJobResponse,
    auth="api:queue.admin",
    errors={
        404: "Job not found",
        409: "The job is not dispatched or running, or is already being stopped",
    },
)
async def preempt_job(request: web.Request) -> web.StreamResponse:
    job_id = request.match_info["job_id"]
    await visible_job(request, job_id)  # before the body: a wrong id is the first fix
    body = await parse_body(request, PreemptJobRequest)
    actor = actor_name(request)
    reason = f"preempted by {actor}" + (f": {body.reason}" if body.reason else "")
    return web.json_response(await fleet_of(request).preempt(job_id, reason, actor))
