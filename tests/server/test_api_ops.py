"""Operations endpoints: health, readiness, Prometheus metrics, the OpenAPI document, the
audit log with its filters and chain check, the configs list and the live event feed."""

from __future__ import annotations

import re
import sqlite3
from typing import Any

from tests.server.protocol import EventStream
from tunefleet.http.route_table import routes


async def test_healthz_and_readyz_need_no_token(server: Any) -> None:
    resp = await server.client.get("/healthz")
    health = await resp.json()
    assert resp.status == 200
    # SQLite: one process, always the active one; no leadership term.
    assert (health["status"], health["role"], health["term"]) == ("ok", "active", None)
    resp = await server.client.get("/readyz")
    assert resp.status == 200
    assert await resp.json() == {"status": "ready", "workers": 0}
    assert resp.headers["X-Request-ID"]


def _metric(text: str, name: str, labels: str = "") -> float:
    pattern = re.escape(name + (f"{{{labels}}}" if labels else "")) + r" (\S+)"
    found = re.search(rf"^{pattern}$", text, re.MULTILINE)
    assert found, f"{name}{labels} not in metrics"
    return float(found.group(1))


async def test_metrics_show_workers_by_state_and_queue_depth(server: Any) -> None:
    worker = await server.connected_worker()
    await server.create_worker("waiting")
    await server.running_job(worker)
    await server.submit(target="worker")
    await server.submit(target="worker")
    resp = await server.client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    text = await resp.text()
    assert "# TYPE tunefleet_workers gauge" in text
    assert _metric(text, "tunefleet_workers", 'state="busy"') == 1
    assert _metric(text, "tunefleet_workers", 'state="connecting"') == 1
    assert _metric(text, "tunefleet_workers", 'state="idle"') == 0
    assert _metric(text, "tunefleet_workers", 'state="offline"') == 0
    assert _metric(text, "tunefleet_queue_depth") == 2
    assert _metric(text, "tunefleet_jobs_running") == 1
    assert _metric(text, "tunefleet_worker_registrations_total", 'outcome="success"') == 1
    worker.close()


async def test_metrics_count_auth_failures(server: Any) -> None:
    await server.client.get("/api/queue")
    await server.client.post("/api/workers/heartbeat", json={})
    text = await (await server.client.get("/metrics")).text()
    assert _metric(text, "tunefleet_auth_failures_total", 'kind="api"') == 1
    assert _metric(text, "tunefleet_auth_failures_total", 'kind="worker"') == 1


async def test_openapi_lists_every_route(server: Any) -> None:
    resp = await server.client.get("/api/openapi.json")
    assert resp.status == 200
    document = await resp.json()
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    missing = [
        f"{spec.method} {spec.openapi_path}"
        for spec in routes.specs
        if spec.include_in_schema and spec.method.lower() not in paths.get(spec.openapi_path, {})
    ]
    assert missing == []
    # Only the S3-spelled upload endpoint stays out (one path, operations chosen by query).
    hidden = {spec.path for spec in routes.specs if not spec.include_in_schema}
    assert hidden == {"/api/artifacts/{bucket}/{key:.+}", "/api/artifacts/{bucket}"}
    assert len(routes.specs) >= 31
    register = paths["/api/workers/register"]["post"]
    assert register["security"] == [{"workerToken": []}]
    assert "401" in register["responses"]


async def test_configs_lists_both_layouts(server: Any) -> None:
    data = await server.ok("GET", "/api/configs")
    assert [c["name"] for c in data["configs"]] == ["multi-gpu", "sdxl-lora", "tiny"]
    assert data["total"] == 3


# --- audit ------------------------------------------------------------------------------


async def test_audit_records_actions_and_filters_them(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = (await server.submit(target="worker"))["job_id"]
    await worker.stream.expect("job_submit")
    await server.ok("POST", f"/api/admin/workers/{worker.worker_id}/drain")
    events = await server.audit()
    kinds = [e["kind"] for e in events]
    for kind in (
        "worker.created",
        "worker.register",
        "job.submitted",
        "job.dispatched",
        "worker.drained",
    ):
        assert kind in kinds
    assert events == sorted(events, key=lambda e: e["id"], reverse=True)  # newest first
    by_kind = await server.audit(kind="worker.drained")
    assert [e["target"] for e in by_kind] == [worker.worker_id]
    assert by_kind[0]["actor"].startswith("token:admin#")
    by_target = await server.audit(target=job_id)
    assert {e["kind"] for e in by_target} == {"job.submitted", "job.dispatched"}
    by_actor = await server.audit(actor=worker.worker_id)
    assert [e["kind"] for e in by_actor] == ["worker.register"]
    assert await server.audit(outcome="denied") == []
    since = await server.audit(since="2023-11-14T22:13:20Z")
    assert len(since) == len(events)
    assert await server.audit(until="2023-11-14T22:13:20Z") == []
    page = await server.ok("GET", "/api/audit", params={"limit": 2, "offset": 1})
    assert [e["id"] for e in page["events"]] == [e["id"] for e in events[1:3]]
    worker.close()


async def test_audit_bad_filters_are_400(server: Any) -> None:
    for query in ("since=yesterday", "limit=0", "limit=9999", "offset=-3"):
        resp = await server.get(f"/api/audit?{query}")
        assert resp.status == 400, query
        assert (await resp.json())["detail"]


async def test_audit_verify_detects_tampering(server: Any) -> None:
    await server.create_worker("a")
    await server.create_worker("b")
    assert await server.ok("GET", "/api/audit/verify") == {"ok": True, "first_bad_id": None}
    target_id = (await server.audit(kind="worker.created"))[-1]["id"]
    with sqlite3.connect(server.data_dir / "tunefleet.db") as db:
        db.execute("UPDATE audit_event SET actor = 'mallory' WHERE id = ?", (target_id,))
    assert await server.ok("GET", "/api/audit/verify") == {"ok": False, "first_bad_id": target_id}


async def test_auth_failures_are_audited_without_the_token(server: Any) -> None:
    bogus = "tf_this-is-not-a-valid-token-at-all-0123456789abcdef"
    await server.client.get("/api/queue", headers=server.bearer(bogus))
    await server.client.post(
        "/api/workers/register", json={"name": "x"}, headers={"X-Worker-Token": "wt_bogus"}
    )
    denied = await server.audit(outcome="denied")
    assert {(e["kind"], e["target"]) for e in denied} == {
        ("auth.failed", "GET /api/queue"),
        ("worker.register_failed", "POST /api/workers/register"),
    }
    assert all(e["client_address"] == "127.0.0.1" for e in denied)
    assert bogus not in str(denied)
    assert bogus.encode() not in (server.data_dir / "audit.jsonl").read_bytes()


# --- live event feed --------------------------------------------------------------------


async def test_events_feed_receives_job_and_worker_events(server: Any) -> None:
    resp = await server.client.get("/api/events", headers=server.admin)
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    feed = EventStream(resp)
    hello = await feed.expect("hello")
    assert hello.data["subscribers"] == 1
    job_id = (await server.submit(target="worker"))["job_id"]
    job = await feed.expect("job")
    assert (job.data["job_id"], job.data["status"]) == (job_id, "pending")
    assert job.id is not None
    worker = await server.create_worker()
    worker_event = await feed.expect("worker")
    assert worker_event.data["worker"]["worker_id"] == worker.worker_id
    feed.close()


async def test_events_feed_needs_a_token(server: Any) -> None:
    resp = await server.client.get("/api/events")
    assert resp.status == 401


async def test_every_response_carries_a_request_id_streams_included(server: Any) -> None:
    worker = await server.connected_worker()
    assert worker.stream.response.headers["X-Request-ID"]
    job_id = await server.running_job(worker)
    final = await worker.report(job_id, "completed")  # written early by the handler
    assert final.headers["X-Request-ID"]
    follow = await server.client.get(
        f"/api/queue/{job_id}/logs?follow=true", headers={**server.admin, "X-Request-ID": "abc-1"}
    )
    assert follow.headers["X-Request-ID"] == "abc-1"
    follow.close()
    events = await server.client.get("/api/events", headers=server.admin)
    assert events.headers["X-Request-ID"]
    events.close()
    worker.close()


async def test_events_feed_hides_worker_details_from_tokens_without_admin_workers(
    server: Any,
) -> None:
    submitter = await server.api_token("queue.submit", name="researcher")
    resp = await server.client.get("/api/events", headers=server.bearer(submitter))
    feed = EventStream(resp)
    await feed.expect("hello")
    await server.create_worker(name="private-box")  # a worker event nobody here may see
    job_id = (await server.submit(target="worker"))["job_id"]
    job = await feed.expect("job")
    assert job.data["job_id"] == job_id
    assert "private-box" not in str(job.data)
    feed.close()


async def test_events_feed_can_be_narrowed_to_kinds(server: Any) -> None:
    resp = await server.client.get("/api/events?kinds=job", headers=server.admin)
    feed = EventStream(resp)
    await feed.expect("hello")
    await server.create_worker(name="ignored-box")
    job_id = (await server.submit(target="worker"))["job_id"]
    job = await feed.expect("job")  # the worker event before it was never sent
    assert job.data["job_id"] == job_id
    feed.close()


async def test_shutdown_ends_open_event_feeds_at_once(server: Any) -> None:
    resp = await server.client.get("/api/events", headers=server.admin)
    feed = EventStream(resp)
    await feed.expect("hello")
    server.fleet.ctx.hub.close()
    await feed.expect_closed(timeout_s=5)
