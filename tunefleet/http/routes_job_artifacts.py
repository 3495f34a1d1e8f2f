"""People's side of artifacts: list, download and delete a job's stored outputs."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tunefleet.actors.records import iso
from tunefleet.artifacts.keys import check_key
from tunefleet.artifacts.service import Artifacts
from tunefleet.artifacts.store import PRESIGN_TTL_S
from tunefleet.fsm.job import TERMINAL_JOB_STATES
from tunefleet.http.body import parse_query
from tunefleet.http.errors import ApiError
from tunefleet.http.job_access import check_may_change, visible_job
from tunefleet.http.route_table import actor_name, principal_of, routes
from tunefleet.http.routes_artifacts import artifacts_of, serve_object, stored_row
from tunefleet.http.schemas_artifacts import (
    ArtifactListResponse,
    DeleteArtifactsResponse,
    DownloadArtifactQuery,
)

_JOB_NOT_FOUND = {404: "Job not found"}


@routes.route(
    "GET",
    "/api/queue/{job_id}/artifacts",
    summary="The job's stored outputs (key, size, SHA-256, attempt, time) and checkpoints",
    response=ArtifactListResponse,
    auth="api",
    errors=_JOB_NOT_FOUND,
)
async def list_job_artifacts(request: web.Request) -> web.StreamResponse:
    job_id = request.match_info["job_id"]
    await visible_job(request, job_id)
    artifacts = artifacts_of(request)
    await artifacts.sync_bucket(job_id)
    records = artifacts.records
    rows = await records.objects(job_id)
    checkpoints = await records.checkpoints(job_id)
    return web.json_response(
        {
            "job_id": job_id,
            "artifacts": [
                {
                    "key": r.key,
                    "size": r.size,
                    "sha256": r.sha256,
                    "attempt": r.attempt,
                    "created_at": iso(r.created_at),
                }
                for r in rows
            ],
            "checkpoints": [
                {
                    "name": c.name,
                    "step": c.step,
                    "attempt": c.attempt,
                    "bytes": c.bytes,
                    "created_at": iso(c.created_at),
                }
                for c in checkpoints
            ],
        }
    )


@routes.route(
    "GET",
    "/api/queue/{job_id}/artifacts/{key:.+}",
    summary="Download one stored output (HTTP Range supported), or a redirect to a presigned URL",
    auth="api",
    query=DownloadArtifactQuery,
    errors={**_JOB_NOT_FOUND, 400: "Bad key or redirect value"},
    description=(
        "With a bucket store the answer is a 307 to a presigned URL of the object. "
        "With ?redirect=false the answer is JSON saying where to fetch it instead: "
        '{"key", "size", "sha256", "url", "presigned", "expires_in"}.'
    ),
    content_type="application/octet-stream",
)
async def download_job_artifact(request: web.Request) -> web.StreamResponse:
    job_id = request.match_info["job_id"]
    key = check_key(request.match_info["key"])
    redirect = parse_query(request, DownloadArtifactQuery).redirect
    await visible_job(request, job_id)
    artifacts = artifacts_of(request)
    if redirect:
        principal = principal_of(request)
        return await serve_object(request, artifacts, job_id, key, actor_name(request), principal)
    return web.json_response(await _download_link(request, artifacts, job_id, key))


async def _download_link(
    request: web.Request, artifacts: Artifacts, job_id: str, key: str
) -> dict[str, Any]:
    """Where to fetch the object, for a client that cannot follow a 307 to another origin
    (the web UI: its connect-src is 'self'). A bucket's presigned URL needs no token and
    must be sent none; handing it out is the download, so it is audited here. The embedded
    store's URL is this path, fetched with the bearer token (audited when fetched)."""
    row = await stored_row(artifacts, job_id, key)
    store = artifacts.store
    link = {"key": row.key, "size": row.size, "sha256": row.sha256}
    if store.presigns:
        await artifacts.downloaded(job_id, key, actor_name(request), request.remote)
        url = store.presign_get(job_id, key)
        return {**link, "url": url, "presigned": True, "expires_in": PRESIGN_TTL_S}
    return {**link, "url": request.rel_url.raw_path, "presigned": False, "expires_in": None}


@routes.route(
    "DELETE",
    "/api/queue/{job_id}/artifacts",
    summary="Delete every stored output and checkpoint of an ended job",
    response=DeleteArtifactsResponse,
    auth="api:queue.submit",
    errors={
        **_JOB_NOT_FOUND,
        403: "A researcher deletes their own jobs' outputs, a lead their team's, queue.admin any",
        409: "The job has not ended",
    },
)
async def delete_job_artifacts(request: web.Request) -> web.StreamResponse:
    job_id = request.match_info["job_id"]
    row = await visible_job(request, job_id)
    check_may_change(principal_of(request), row, "delete the outputs of")
    state = row.state
    actor = actor_name(request)
    if state not in TERMINAL_JOB_STATES:
        raise ApiError(
            409, f"job {job_id} is {state}; cancel it (or wait for it to end), then delete"
        )
    deleted = await artifacts_of(request).delete_job(job_id, actor)
    return web.json_response({"job_id": job_id, "deleted": deleted})
