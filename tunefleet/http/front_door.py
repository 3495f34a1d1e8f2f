"""The server's one middleware: what every request passes through before its route.

From the outside in: the request's duration in ``http_request_duration_seconds``
(``http/metrics.py``), its request id and JSON errors (``http/errors.py``), and the
standby gate (``http/leadership.py``). One coroutine rather than three nested
middlewares: each layer was a call, a coroutine and a frame on every request, the
heartbeats' and status reports' included (issue 14). The behaviour is theirs, in the
same order; ``request_timing_middleware`` and ``error_middleware`` remain for apps
that want one of them alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from structlog.contextvars import bind_contextvars, reset_contextvars

from tunefleet.http.errors import REQUEST_ID_HEADER, failure_response, start_request
from tunefleet.http.leadership import Leadership, answer_inactive
from tunefleet.http.metrics import CLIENT_CLOSED_STATUS, METHODS, route_label
from tunefleet.metrics import Metrics


def front_door(
    metrics_of: Callable[[web.Request], Metrics | None],
    leadership_of: Callable[[web.Request], Leadership | None],
) -> Middleware:
    """``metrics_of`` and ``leadership_of`` find them from the request (the app creates
    both at startup, after its middleware list is fixed); None: not measured, not gated."""

    @web.middleware
    async def front_door(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = perf_counter()
        status = 500
        try:
            rid = start_request(request)
            # Every log line of the request carries its id.
            tokens = bind_contextvars(request_id=rid)
            try:
                current = leadership_of(request)
                if current is None or current.role == "active":
                    response = await handler(request)
                else:
                    response = await answer_inactive(request, handler, current)
            except Exception as error:
                response = failure_response(request, error, rid)
            finally:
                reset_contextvars(**tokens)
            if not response.prepared:
                response.headers[REQUEST_ID_HEADER] = rid
            status = response.status
            return response
        except web.HTTPException as error:  # a raised redirect, passed on
            status = error.status
            raise
        except asyncio.CancelledError:
            status = CLIENT_CLOSED_STATUS
            raise
        finally:
            metrics = metrics_of(request)
            if metrics is not None:
                method = request.method if request.method in METHODS else "other"
                elapsed_s = perf_counter() - started
                metrics.observe_http_request(method, route_label(request), status, elapsed_s)

    return front_door
