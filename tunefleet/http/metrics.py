"""The HTTP side of the orchestrator's metrics: a request's observation and its route
label (``front_door`` observes every request). The metrics themselves live in
``tunefleet/metrics.py``.
"""

from __future__ import annotations

import time

from aiohttp import web

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


def observe_request(metrics: Metrics, request: web.Request, status: int, started: float) -> None:
    """One request in ``http_request_duration_seconds``: its method, route and the status
    the client got, ``started`` being its ``time.perf_counter()`` at the start."""
    method = request.method
    if method not in METHODS:
        method = "other"
    elapsed_s = time.perf_counter() - started
    metrics.observe_http_request(method, route_label(request), status, elapsed_s)
