"""POST /api/jobs/{id}/preempt over HTTP, with a worker that speaks as SimpleTuner's agent
does (tests/server/protocol.py): it stops its trainer on the job_cancel and reports
``cancelled``; the orchestrator records ``preempted`` and requeues the job. Every refusal
says what to do, and changes nothing."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import Server


async def test_simpletuners_agent_stops_on_job_cancel_and_the_job_is_requeued_preempted(
    server: Server,
) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker, max_retries=0)
    data = await server.ok("POST", f"/api/jobs/{job_id}/preempt", {"reason": "make room"})
    assert data["status"] == "preempting" and data["attempt"] == 1
    assert data["worker_id"] == worker.worker_id and data["grace_seconds"] == 120

    cancel = await worker.stream.expect("job_cancel")
    # What SimpleTuner's agent reads is there; the additions are for tunefleet's agent.
    assert (cancel.data["type"], cancel.data["job_id"]) == ("job_cancel", job_id)
    assert cancel.data["preempt"] is True and cancel.data["grace_seconds"] == 120
    assert cancel.data["reason"].endswith(": make room")
    # That agent reports the word it always does, without an attempt number.
    assert (await worker.report(job_id, "cancelled")).status == 200

    # Requeued, and sent to the same (now free) worker again: attempt 2 of a job with
    # max_retries 0, so the preempted attempt spent no retry.
    again = await worker.stream.expect("job_submit")
    assert (again.data["job_id"], again.data["attempt"]) == (job_id, 2)
    job = await server.job(job_id)
    assert job["status"] == "dispatched"
    assert (job["attempts"], job["preempted"], job["undelivered"]) == (2, 1, 0)
    [listed] = [j for j in (await server.ok("GET", "/api/queue"))["jobs"] if j["job_id"] == job_id]
    assert listed["preempted"] == 1
    first = job["attempt_history"][0]
    assert first["outcome"] == "preempted" and first["reason"].endswith(": make room")
    kinds = [entry["kind"] for entry in job["timeline"]]
    assert "preempted" in kinds
    assert (await worker.report(job_id, "training")).status == 200
    assert (await worker.report(job_id, "completed")).status == 200
    await server.wait_job(job_id, "completed")

    metrics = await (await server.client.get("/metrics")).text()
    assert 'tunefleet_preemptions_total{team="default"} 1.0' in metrics
    [audited] = await server.audit(kind="job.preempted")
    assert (audited["target"], audited["detail"]["attempt"]) == (job_id, 1)
    worker.close()


async def _refused(server: Server, path: str, body: Any, status: int, **kw: Any) -> str:
    resp = await server.post(path, body, **kw)
    data = await resp.json()
    assert resp.status == status, data
    return str(data["detail"])


async def test_a_job_not_running_is_refused_with_what_to_do(server: Server) -> None:
    job_id = (await server.submit(target="worker"))["job_id"]  # no worker: it waits
    detail = await _refused(server, f"/api/jobs/{job_id}/preempt", {}, 409)
    assert detail == (
        f"job {job_id} is pending, not dispatched or running; nothing to preempt "
        "(it holds no worker; cancel it instead if it should not run)"
    )
    assert (await server.job(job_id))["status"] == "pending"
    await server.ok("POST", f"/api/queue/{job_id}/cancel", {})
    detail = await _refused(server, f"/api/jobs/{job_id}/preempt", {}, 409)
    assert "is cancelled" in detail and "it has ended" in detail


async def test_an_unknown_job_is_not_found(server: Server) -> None:
    detail = await _refused(server, "/api/jobs/j_nope/preempt", {}, 404)
    assert detail == "Job not found: j_nope"


async def test_a_second_preemption_is_refused(server: Server) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await server.ok("POST", f"/api/jobs/{job_id}/preempt", {})
    detail = await _refused(server, f"/api/jobs/{job_id}/preempt", {}, 409)
    assert "already being preempted" in detail
    worker.close()


async def test_a_bad_body_is_refused_before_anything_happens(server: Server) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    detail = await _refused(server, f"/api/jobs/{job_id}/preempt", {"why": "x"}, 400)
    assert "why" in detail
    detail = await _refused(server, f"/api/jobs/{job_id}/preempt", {"reason": "x" * 300}, 400)
    assert "reason" in detail
    assert (await server.job(job_id))["status"] == "running"
    await worker.stream.expect_nothing()
    worker.close()


async def test_preempting_needs_queue_admin(server: Server) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    token = await server.api_token("queue.submit")
    detail = await _refused(
        server, f"/api/jobs/{job_id}/preempt", {}, 403, headers=server.bearer(token)
    )
    assert detail == "Permission denied: queue.admin"
    assert (await server.job(job_id))["status"] == "running"
    worker.close()
