"""Server-Sent Event streams for people: the live event feed and a job's log follow.

Each is held under the API token that opened it (tunefleet/http/principal_streams.py):
revoking the token ends it, and nothing is sent once it has been ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp_sse import EventSourceResponse

from tunefleet.actors.events import CLOSING, HubEvent, Subscription
from tunefleet.fsm.job import TERMINAL_JOB_STATES
from tunefleet.http import keys
from tunefleet.http.auth import ADMIN_WORKERS, API_PRINCIPAL_KEY
from tunefleet.http.job_access import SeenJobs, viewer_of
from tunefleet.http.job_views import log_line_view
from tunefleet.http.principal_streams import HeldStream, held_stream

if TYPE_CHECKING:
    from tunefleet.storage.store import Store

_PING_S = 15.0
_NO_LIBRARY_PING_S = 86_400.0
_BACKLOG_PAGE = 1000


async def _start(request: web.Request) -> EventSourceResponse:
    sse = EventSourceResponse(ping_interval=_NO_LIBRARY_PING_S, sep="\n")
    sse.headers["X-Accel-Buffering"] = "no"  # let reverse proxies pass events at once
    await sse.prepare(request)
    return sse


class StreamEnded(Exception):
    """The stream's credential was revoked (or narrowed): send nothing more."""


class _Feed:
    """An open SSE response that refuses to write once its held stream has ended."""

    __slots__ = ("held", "sse")

    def __init__(self, sse: EventSourceResponse, held: HeldStream) -> None:
        self.sse = sse
        self.held = held

    async def send(self, kind: str, data: dict[str, Any], id_: Any = None) -> None:
        if self.held.ended:
            raise StreamEnded
        payload = json.dumps({"type": kind, **data}, separators=(",", ":"), default=str)
        await self.sse.send(payload, event=kind, id=str(id_) if id_ is not None else None)


# What ends a stream's loop without an error of the server's own.
_ENDINGS = (ConnectionResetError, TimeoutError, RuntimeError, StreamEnded)


async def _next(sub: Subscription, feed: _Feed) -> HubEvent | None:
    """The next hub event, or None once the subscription ended; sends a ping while
    waiting so dead clients are noticed."""
    while not sub.ended:
        try:
            event = await asyncio.wait_for(sub.queue.get(), timeout=_PING_S)
        except TimeoutError:
            await feed.send("ping", {})
            continue
        return None if event.kind == CLOSING or sub.closed else event
    return None


async def _finish(sse: EventSourceResponse) -> EventSourceResponse:
    sse.stop_streaming()
    with contextlib.suppress(ConnectionResetError, TimeoutError, RuntimeError):
        await sse.write_eof()
    return sse


# Worker snapshots carry labels, host names and client addresses: for admins only,
# as GET /api/admin/workers is.
_WORKER_KINDS = frozenset({"worker", "worker_deleted"})


async def stream_events(request: web.Request) -> web.StreamResponse:
    """Fleet and queue changes, for live pages, until the client leaves.

    ``?kinds=job,job_progress`` narrows the feed; worker events need admin.workers."""
    hub = request.app[keys.HUB]
    kinds = _requested_kinds(request)
    principal = request[API_PRINCIPAL_KEY]
    if not principal.has(ADMIN_WORKERS):
        kinds = (kinds or hub.known_kinds()) - _WORKER_KINDS
    # Job events only of the jobs the principal may see; None: an admin sees them all.
    seen = SeenJobs(request, principal) if viewer_of(principal) is not None else None
    with hub.subscribe(kinds) as sub, held_stream(request, principal, sub.close) as held:
        sse = await _start(request)
        feed = _Feed(sse, held)
        with contextlib.suppress(*_ENDINGS):
            await feed.send("hello", {"subscribers": hub.subscriber_count})
            while (event := await _next(sub, feed)) is not None:
                job_id = event.data.get("job_id")
                if seen is not None and job_id is not None:
                    allowed = seen.known(job_id)
                    if allowed is None:
                        allowed = await seen.allows(job_id)
                    if not allowed:
                        continue
                await feed.send(event.kind, event.data, event.seq)
            if sub.overflowed:
                await feed.send("overflow", {"detail": "fell behind; reload and reconnect"})
    return await _finish(sse)


def _requested_kinds(request: web.Request) -> frozenset[str] | None:
    raw = request.query.get("kinds", "").strip()
    if not raw:
        return None
    return frozenset(k.strip() for k in raw.split(",") if k.strip())


async def follow_job_logs(request: web.Request, job_id: str, from_seq: int) -> web.StreamResponse:
    """What is stored, then each new line as agents report it, then `end`.

    Lines are always read back from storage (a hub event only says there are new ones),
    so every `log` event carries the stored seq as its id: one cursor for the backlog and
    the live tail, the one ``?from_seq=`` takes, and a batch an agent re-sends is not
    shown twice.
    """
    hub = request.app[keys.HUB]
    store = request.app[keys.STORE]
    principal = request[API_PRINCIPAL_KEY]
    subscribed = hub.subscribe(frozenset({"job_logs", "job"}))
    with subscribed as sub, held_stream(request, principal, sub.close) as held:
        sse = await _start(request)
        feed = _Feed(sse, held)
        cursor = max(0, from_seq - 1)
        with contextlib.suppress(*_ENDINGS):
            cursor = await _send_stored_lines(feed, store, job_id, cursor)
            job = await store.get_job(job_id)
            if job is not None and job.state in TERMINAL_JOB_STATES:
                end = {"job_id": job_id, "status": job.state, "error": job.error}
                await feed.send("end", end)
                return await _finish(sse)
            while (event := await _next(sub, feed)) is not None:
                if event.data.get("job_id") != job_id:
                    continue
                if event.kind == "job_logs":
                    cursor = await _send_stored_lines(feed, store, job_id, cursor)
                elif event.data.get("status") in TERMINAL_JOB_STATES:
                    await _send_stored_lines(feed, store, job_id, cursor)
                    await feed.send(
                        "end",
                        {
                            "job_id": job_id,
                            "status": event.data["status"],
                            "error": event.data.get("error"),
                        },
                    )
                    break
    return await _finish(sse)


async def _send_stored_lines(feed: _Feed, store: Store, job_id: str, cursor: int) -> int:
    """Send the job's stored lines after ``cursor``; returns the new cursor."""
    while True:
        rows = await store.read_logs(job_id, after_id=cursor, limit=_BACKLOG_PAGE)
        for row in rows:
            await feed.send("log", log_line_view(row), row.id)
            cursor = row.id
        if len(rows) < _BACKLOG_PAGE:
            return cursor
