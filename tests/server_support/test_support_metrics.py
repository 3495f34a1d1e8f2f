"""Metrics on a private registry, their exposition, and the request-timing middleware."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tunefleet.http.front_door import front_door
from tunefleet.metrics import Metrics

ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, _ = metrics.render()
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, tuple(sorted(labels.items()))))


def test_every_metric_is_exported_with_its_name() -> None:
    metrics = Metrics()
    metrics.queue_depth.set(4)
    metrics.jobs_running.set(2)
    metrics.heartbeats.inc()
    metrics.requeues.labels(reason="heartbeat_timeout").inc()
    metrics.jobs_finished.labels(outcome="completed").inc(3)
    metrics.registrations.labels(outcome="success").inc()
    metrics.auth_failures.labels(kind="worker_token").inc()
    metrics.dispatch_latency.observe(0.002)
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain; version=")
    assert value(metrics, "tunefleet_queue_depth") == 4
    assert value(metrics, "tunefleet_jobs_running") == 2
    assert value(metrics, "tunefleet_heartbeats_total") == 1
    assert value(metrics, "tunefleet_job_requeues_total", reason="heartbeat_timeout") == 1
    assert value(metrics, "tunefleet_jobs_finished_total", outcome="completed") == 3
    assert value(metrics, "tunefleet_worker_registrations_total", outcome="success") == 1
    assert value(metrics, "tunefleet_auth_failures_total", kind="worker_token") == 1
    assert value(metrics, "tunefleet_dispatch_latency_seconds_count") == 1
    assert b"# HELP tunefleet_dispatch_latency_seconds" in body


def test_a_job_end_counts_under_its_own_outcome() -> None:
    metrics = Metrics()
    for outcome in ("completed", "failed", "completed", "cancelled", "completed"):
        metrics.job_finished(outcome)
    assert value(metrics, "tunefleet_jobs_finished_total", outcome="completed") == 3
    assert value(metrics, "tunefleet_jobs_finished_total", outcome="failed") == 1
    assert value(metrics, "tunefleet_jobs_finished_total", outcome="cancelled") == 1


def test_dispatch_buckets_span_half_a_millisecond_to_ten_seconds() -> None:
    metrics = Metrics()
    metrics.dispatch_latency.observe(0.0003)
    metrics.dispatch_latency.observe(0.0007)
    metrics.dispatch_latency.observe(7.0)
    bucket = "tunefleet_dispatch_latency_seconds_bucket"
    assert value(metrics, bucket, le="0.0005") == 1
    assert value(metrics, bucket, le="0.001") == 2
    assert value(metrics, bucket, le="5.0") == 2
    assert value(metrics, bucket, le="10.0") == 3
    bounds = [labels[0][1] for name, labels in samples(metrics) if name == bucket]
    assert len(bounds) >= 12  # fine-grained, not the default 15 coarse ones from 5 ms


def test_two_instances_do_not_share_a_registry() -> None:
    a, b = Metrics(), Metrics()
    a.heartbeats.inc(5)
    assert value(a, "tunefleet_heartbeats_total") == 5
    assert value(b, "tunefleet_heartbeats_total") == 0
    assert a.registry is not b.registry


def test_worker_counts_export_every_state_even_at_zero() -> None:
    metrics = Metrics()
    metrics.set_worker_counts({"idle": 3, "busy": 1})
    assert value(metrics, "tunefleet_workers", state="idle") == 3
    assert value(metrics, "tunefleet_workers", state="busy") == 1
    assert value(metrics, "tunefleet_workers", state="offline") == 0
    metrics.set_worker_counts({"busy": 2})
    assert value(metrics, "tunefleet_workers", state="idle") == 0
    assert value(metrics, "tunefleet_workers", state="busy") == 2
    metrics.set_worker_counts({"quarantined": 1})  # a state added later still shows
    assert value(metrics, "tunefleet_workers", state="quarantined") == 1


def test_http_requests_accumulate_per_method_route_and_status() -> None:
    metrics, other = Metrics(), Metrics()
    metrics.observe_http_request("POST", "/api/workers/heartbeat", 200, 0.0004)
    metrics.observe_http_request("POST", "/api/workers/heartbeat", 200, 0.003)
    metrics.observe_http_request("POST", "/api/workers/heartbeat", 409, 0.001)
    labels = {"method": "POST", "route": "/api/workers/heartbeat"}
    count = "tunefleet_http_request_duration_seconds_count"
    assert value(metrics, count, **labels, status="200") == 2
    assert value(metrics, count, **labels, status="409") == 1
    total = value(metrics, "tunefleet_http_request_duration_seconds_sum", **labels, status="200")
    assert total == pytest.approx(0.0034)
    bucket = "tunefleet_http_request_duration_seconds_bucket"
    assert value(metrics, bucket, **labels, status="200", le="0.0005") == 1
    # Each Metrics keeps its own series.
    assert value(other, count, **labels, status="200") is None


# --- middleware -------------------------------------------------------------------


def build_app(metrics: Metrics | None) -> web.Application:
    """Behind the server's middleware, which measures what its lookup finds (None: not
    measured)."""

    async def job(request: web.Request) -> web.Response:
        return web.json_response({"job": request.match_info["job_id"]})

    async def conflict(_: web.Request) -> web.Response:
        raise web.HTTPConflict(text="busy")

    async def broken(_: web.Request) -> web.Response:
        raise RuntimeError("bug")

    app = web.Application(middlewares=[front_door(lambda _: metrics, lambda _: None)])
    app.router.add_get("/api/jobs/{job_id}", job)
    app.router.add_post("/api/jobs/{job_id}/cancel", conflict)
    app.router.add_route("*", "/broken", broken)
    return app


def http_count(metrics: Metrics, method: str, route: str, status: str) -> float | None:
    return value(
        metrics,
        "tunefleet_http_request_duration_seconds_count",
        method=method,
        route=route,
        status=status,
    )


async def test_middleware_labels_by_route_template_not_raw_url(
    aiohttp_client: ClientFactory,
) -> None:
    metrics = Metrics()
    client = await aiohttp_client(build_app(metrics))
    for job_id in ("j_1", "j_2", "j_3"):
        assert (await client.get(f"/api/jobs/{job_id}")).status == 200
    assert http_count(metrics, "GET", "/api/jobs/{job_id}", "200") == 3
    routes = {dict(labels).get("route") for _, labels in samples(metrics)}
    assert not any(r and "j_" in r for r in routes)


async def test_middleware_records_error_statuses(aiohttp_client: ClientFactory) -> None:
    metrics = Metrics()
    client = await aiohttp_client(build_app(metrics))
    assert (await client.post("/api/jobs/j_1/cancel")).status == 409
    assert (await client.get("/broken")).status == 500
    assert (await client.get("/no/such/path/j_9")).status == 404
    assert (await client.request("PROPFIND", "/broken")).status == 500
    assert http_count(metrics, "POST", "/api/jobs/{job_id}/cancel", "409") == 1
    assert http_count(metrics, "GET", "/broken", "500") == 1
    assert http_count(metrics, "GET", "unmatched", "404") == 1
    assert http_count(metrics, "other", "/broken", "500") == 1


async def test_middleware_can_find_metrics_per_request(aiohttp_client: ClientFactory) -> None:
    metrics = Metrics()
    client = await aiohttp_client(build_app(metrics))
    await client.get("/api/jobs/j_1")
    assert http_count(metrics, "GET", "/api/jobs/{job_id}", "200") == 1


async def test_middleware_skips_when_lookup_finds_nothing(aiohttp_client: ClientFactory) -> None:
    client = await aiohttp_client(build_app(None))
    assert (await client.get("/api/jobs/j_1")).status == 200
