"""The server's one middleware: what every request passes through before its route.

From the outside in: the request's duration in ``http_request_duration_seconds``
(``http/metrics.py``), its request id and JSON errors (``http/errors.py``), and the
standby gate (``http/leadership.py``). One middleware rather than three nested: each
layer of aiohttp's chain was a wrapper, a call and a frame on every request, the
heartbeats' and status reports' included (issue 14). The behaviour is theirs, in the
same order, from the same pieces (``errors.answer_or_render``,
``metrics.observe_request``); ``error_middleware`` remains for apps that want only
its JSON errors and request ids.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from time import perf_counter

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from tunefleet.http.errors import answer_or_render
from tunefleet.http.leadership import Leadership, answer_inactive
from tunefleet.http.metrics import CLIENT_CLOSED_STATUS, observe_request
from tunefleet.metrics import Metrics


def front_door(
    metrics_of: Callable[[web.Request], Metrics | None],
    leadership_of: Callable[[web.Request], Leadership | None],
) -> Middleware:
    """``metrics_of`` and ``leadership_of`` find them from the request (the app creates
    both at startup, after its middleware list is fixed); None: not measured, not gated."""
    return _front_door(lambda request: (metrics_of(request), leadership_of(request)))


def app_front_door(
    metrics_key: web.AppKey[Metrics], leadership_key: web.AppKey[Leadership]
) -> Middleware:
    """``front_door`` finding both under these keys of the request's app: the app looked
    up once per request, not once for each (the server's middleware; issue 14)."""

    def found(request: web.Request) -> tuple[Metrics | None, Leadership | None]:
        app = request.app
        return app.get(metrics_key), app.get(leadership_key)

    return _front_door(found)


def _front_door(
    found: Callable[[web.Request], tuple[Metrics | None, Leadership | None]],
) -> Middleware:
    @web.middleware
    async def front_door(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = perf_counter()
        status = 500
        metrics, current = found(request)
        try:
            if current is None or current.role == "active":
                response = await answer_or_render(request, handler)
            else:
                response = await answer_or_render(request, partial(_gated, handler, current))
            status = response.status
            return response
        except web.HTTPException as error:  # a raised redirect, passed on
            status = error.status
            raise
        except asyncio.CancelledError:
            status = CLIENT_CLOSED_STATUS
            raise
        finally:
            if metrics is not None:
                observe_request(metrics, request, status, started)

    return front_door


async def _gated(handler: Handler, current: Leadership, request: web.Request) -> web.StreamResponse:
    return await answer_inactive(request, handler, current)
