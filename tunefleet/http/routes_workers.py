"""Worker endpoints (agent → orchestrator), exactly as shared/PROTOCOL.md records them."""

from __future__ import annotations

import asyncio
import contextlib
import json

import structlog
from aiohttp import web
from aiohttp_sse import EventSourceResponse

from tunefleet.actors import messages as m
from tunefleet.actors.stream import StreamEvent
from tunefleet.errors import Forbidden
from tunefleet.gpu_health import sample_from_wire
from tunefleet.http import keys
from tunefleet.http.body import parse_body, parse_query
from tunefleet.http.errors import ApiError
from tunefleet.http.route_table import (
    audit_foreign_job,
    check_disk,
    check_worker_id,
    fleet_of,
    routes,
    success_response,
    worker_id_of,
)
from tunefleet.http.schemas_common import SuccessResponse
from tunefleet.http.schemas_workers import (
    DisconnectRequest,
    HeartbeatRequest,
    JobLogsRequest,
    JobStatusRequest,
    LogBatchResponse,
    QueueCheckResponse,
    RegisterRequest,
    RegisterResponse,
    WorkerIdQuery,
)
from tunefleet.http.stream_socket import bound_silent_peer, dead_peer_timeout_s
from tunefleet.protocol.events import (
    DrainEvent,
    JobCancelEvent,
    JobSubmitEvent,
    PingEvent,
    ShutdownEvent,
)
from tunefleet.protocol.status import TERMINAL_STATUSES, lifecycle_word

log = structlog.get_logger(__name__)

# The library's own comment pings are not needed: we send `ping` events ourselves,
# which SimpleTuner's agent (reading only `data:` lines) also sees.
_NO_LIBRARY_PING_S = 86_400.0
_PING = PingEvent().model_dump_json()
# What json.dumps(data, separators=(",", ":"), default=str) writes, without the encoder
# that json.dumps makes anew on each call given any argument (about 0.8 us an event).
_EVENT_DATA = json.JSONEncoder(separators=(",", ":"), default=str)


@routes.route(
    "POST",
    "/api/workers/register",
    summary="Register the worker and report its GPUs",
    request=RegisterRequest,
    response=RegisterResponse,
    auth="worker",
)
async def register_worker(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, RegisterRequest)
    gpu = body.gpu().model_dump()
    msg = m.Register(
        name=body.name,
        gpu=gpu,
        persistent=body.persistent,
        agent_labels=dict(body.labels or {}),
        current_job_id=body.current_job_id,
        provider=body.provider,
        hostname=body.hostname,
        client_address=request.remote,
        allowed_commands=(
            tuple(body.allowed_commands) if body.allowed_commands is not None else None
        ),
    )
    return web.json_response(await fleet_of(request).register(worker_id_of(request), msg))


@routes.route(
    "GET",
    "/api/workers/stream",
    summary="Server-Sent Events: job_submit, job_cancel, drain, shutdown, ping",
    query=WorkerIdQuery,
    auth="worker",
    content_type="text/event-stream",
    events=(JobSubmitEvent, JobCancelEvent, DrainEvent, ShutdownEvent, PingEvent),
    description="Send Last-Event-ID to receive the events not yet acknowledged.",
)
async def worker_stream(request: web.Request) -> web.StreamResponse:
    query = parse_query(request, WorkerIdQuery)
    worker_id = await check_worker_id(request, query.worker_id)
    fleet = fleet_of(request)
    last_event_id = _last_event_id(request)
    conn = await fleet.open_stream(worker_id, last_event_id)
    open_streams = request.app[keys.OPEN_STREAMS]
    open_streams.add(conn, request.transport)
    ping_s = fleet.ctx.settings.ping_interval_s
    if not bound_silent_peer(request.transport, ping_s):
        log.debug("worker stream without a dead-peer bound (not TCP)", worker_id=worker_id)
    # Plain "\n" line ends: agents that read raw lines for "data: " need no CR stripping.
    # send_timeout: the library's TCP_USER_TIMEOUT (see stream_socket.py) and its bound on
    # a write to a reader that stopped reading.
    sse = EventSourceResponse(
        ping_interval=_NO_LIBRARY_PING_S, send_timeout=dead_peer_timeout_s(ping_s), sep="\n"
    )
    try:
        await sse.prepare(request)
        while True:
            try:
                event = await conn.queue.get(timeout_s=ping_s)
            except TimeoutError:
                await sse.send(_PING, event="ping")
                continue
            if event is None:
                break
            await _send(sse, event)
    # TimeoutError: a reader that stopped reading outlasted the library's send timeout.
    except (ConnectionResetError, TimeoutError, asyncio.CancelledError, RuntimeError) as error:
        log.debug("worker stream ended", worker_id=worker_id, reason=type(error).__name__)
        if isinstance(error, asyncio.CancelledError):
            raise
    finally:
        open_streams.discard(conn)
        fleet.close_stream(worker_id, conn)
        sse.stop_streaming()
    with contextlib.suppress(ConnectionResetError, TimeoutError, RuntimeError):
        await sse.write_eof()
    return sse


async def _send(sse: EventSourceResponse, event: StreamEvent) -> None:
    data = _EVENT_DATA.encode(event.data)
    await sse.send(data, id=str(event.event_id) if event.event_id else None, event=event.type)


def _last_event_id(request: web.Request) -> int | None:
    raw = request.headers.get("Last-Event-ID", "").strip()
    # isdigit() alone accepts "²" and other Unicode digits that int() refuses.
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 19 else None


@routes.route(
    "POST",
    "/api/workers/heartbeat",
    summary="Periodic keepalive with status, progress and GPU samples",
    request=HeartbeatRequest,
    response=SuccessResponse,
    auth="worker",
    errors={409: "The worker is offline; register again"},
)
async def worker_heartbeat(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, HeartbeatRequest)
    worker_id = await check_worker_id(request, body.worker_id)
    accepted = await fleet_of(request).heartbeat(
        worker_id,
        m.HeartbeatReceived(
            status=body.status,
            current_job_id=body.current_job_id,
            job_progress=body.job_progress,
            gpu_utilization=body.gpu_utilization,
            vram_used_gb=body.vram_used_gb,
            gpu_health=(sample_from_wire(body.gpu_health) if body.gpu_health is not None else None),
        ),
    )
    if not accepted:
        raise ApiError(409, "worker is offline; register again (POST /api/workers/register)")
    return success_response()


@routes.route(
    "POST",
    "/api/workers/job/{job_id}/status",
    summary="Report a job's status and progress; the first report acknowledges the dispatch",
    request=JobStatusRequest,
    response=SuccessResponse,
    auth="worker",
    errors={
        403: "Worker not assigned to this job",
        404: "Job not found",
        409: "The job was reassigned, dispatched again (a stale attempt) or has ended; abandon it",
    },
)
async def report_job_status(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, JobStatusRequest)
    job_id = request.match_info["job_id"]
    worker_id = worker_id_of(request)
    fleet = fleet_of(request)
    status = lifecycle_word(body.status)
    try:
        result = await fleet.report_status(
            worker_id,
            job_id,
            m.StatusReported(
                worker_id,
                status,
                body.progress,
                body.error,
                body.attempt,
                body.outputs.model_dump() if body.outputs is not None else None,
                body.resumed_from,
                body.failure.model_dump() if body.failure is not None else None,
            ),
        )
    except Forbidden:
        await audit_foreign_job(request, job_id)
        raise
    if status not in TERMINAL_STATUSES:
        return success_response()
    # The worker gets its next job only once this answer is on the wire: SimpleTuner's
    # agent drops a job_submit that arrives while its final report is in flight.
    response = success_response()
    try:
        await response.prepare(request)
        await response.write_eof()
    finally:
        if result.get("release_hold"):
            fleet.report_written(worker_id, job_id)
    return response


@routes.route(
    "POST",
    "/api/workers/job/{job_id}/logs",
    summary="Append a batch of the job's output lines (tunefleet addition)",
    request=JobLogsRequest,
    response=LogBatchResponse,
    auth="worker",
    errors={
        403: "Worker not assigned to this job",
        404: "Job not found",
        409: "The attempt has ended (the job finished, was requeued or dispatched again); "
        "stop sending its logs",
        507: "The orchestrator's disk is below its free-space floor; send the lines later",
    },
)
async def report_job_logs(request: web.Request) -> web.StreamResponse:
    check_disk(request, "log lines")
    # The same body limit as any request (1 MiB by default): tunefleet's agent sizes its
    # batches to fit.
    body = await parse_body(request, JobLogsRequest)
    lines = [line.model_dump() for line in body.lines]
    job_id = request.match_info["job_id"]
    try:
        result = await fleet_of(request).report_logs(
            worker_id_of(request), job_id, body.attempt, lines
        )
    except Forbidden:
        await audit_foreign_job(request, job_id)
        raise
    answer = LogBatchResponse(
        stored=result.stored, dropped=result.dropped, quota_reached=result.quota_reached
    )
    return web.json_response(answer.model_dump())


@routes.route(
    "GET",
    "/api/workers/queue",
    summary="Whether a pending job this worker qualifies for exists",
    query=WorkerIdQuery,
    response=QueueCheckResponse,
    auth="worker",
)
async def worker_queue_check(request: web.Request) -> web.StreamResponse:
    query = parse_query(request, WorkerIdQuery)
    worker_id = await check_worker_id(request, query.worker_id)
    has_jobs = await fleet_of(request).has_work_for(worker_id)
    return web.json_response(QueueCheckResponse(has_jobs=has_jobs).model_dump())


@routes.route(
    "POST",
    "/api/workers/disconnect",
    summary="Graceful shutdown notice",
    request=DisconnectRequest,
    response=SuccessResponse,
    auth="worker",
)
async def worker_disconnect(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, DisconnectRequest)
    worker_id = await check_worker_id(request, body.worker_id)
    await fleet_of(request).disconnect(worker_id)
    return success_response()
