"""The HTTP side of the orchestrator's metrics: the request-timing middleware and its
route label. The metrics themselves live in ``tunefleet/metrics.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from tunefleet.metrics import Metrics

# The label for requests no route matched: one value, whatever the raw URL was.
UNMATCHED_ROUTE = "unmatched"
# Any other method a client invents is counted as "other", to bound the label.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# nginx's "client closed request": the handler was cancelled before it answered.
CLIENT_CLOSED_STATUS = 499


def route_label(request: web.Request) -> str:
    """The matched resource's template (``/api/jobs/{job_id}``), never the raw path,
    so one label value per route however many ids pass through it."""
    resource = request.match_info.route.resource
    if resource is None:
        return UNMATCHED_ROUTE
    return resource.canonical


def request_timing_middleware(
    metrics: Metrics | Callable[[web.Request], Metrics | None],
) -> Middleware:
    """An aiohttp middleware that observes every request's duration.

    ``metrics`` is the ``Metrics`` itself or a function finding it from the request
    (for apps that create it at startup, after the middleware list is fixed); when that
    returns None the request is not measured.
    """

    def find(request: web.Request) -> Metrics | None:
        return metrics if isinstance(metrics, Metrics) else metrics(request)

    @web.middleware
    async def time_request(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as error:
            status = error.status
            raise
        except asyncio.CancelledError:
            status = CLIENT_CLOSED_STATUS
            raise
        finally:
            target = find(request)
            if target is not None:
                observe_request(target, request, status, started)

    return time_request


def observe_request(metrics: Metrics, request: web.Request, status: int, started: float) -> None:
    """One request in ``http_request_duration_seconds``: its method, route and the status
    the client got, ``started`` being its ``time.perf_counter()`` at the start."""
    method = request.method
    if method not in METHODS:
        method = "other"
    elapsed_s = time.perf_counter() - started
    metrics.observe_http_request(method, route_label(request), status, elapsed_s)
