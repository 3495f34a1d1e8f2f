"""POST /api/admin/workers/{id}/quarantine and /release over HTTP (issue 26): the
answers, the errors, the audit, /metrics, and no job for a quarantined worker."""

from __future__ import annotations

from typing import Any


async def test_quarantine_and_release_over_http(server: Any) -> None:
    worker = await server.connected_worker()
    path = f"/api/admin/workers/{worker.worker_id}"
    done = await server.ok("POST", f"{path}/quarantine", {"reason": "ECC errors on GPU 0"})
    assert done == {
        "success": True,
        "worker_id": worker.worker_id,
        "status": "idle",
        "quarantined": True,
        "quarantine_reason": "ECC errors on GPU 0",
    }
    again = await server.client.post(f"{path}/quarantine", json={}, headers=server.admin)
    assert again.status == 409
    assert "already quarantined (ECC errors on GPU 0)" in (await again.json())["detail"]
    extra = await server.client.post(f"{path}/quarantine", json={"why": 1}, headers=server.admin)
    assert extra.status == 400  # a misspelt field is refused, not ignored

    shown = await server.ok("GET", path)
    assert (shown["quarantined"], shown["quarantine_reason"]) == (True, "ECC errors on GPU 0")
    metrics = await (await server.client.get("/metrics")).text()
    assert "tunefleet_workers_quarantined 1.0" in metrics
    assert 'tunefleet_worker_quarantines_total{how="manual"} 1.0' in metrics

    # No job reaches it; its wait reason says why.
    job_id = (await server.submit(target="worker"))["job_id"]
    job = await server.job(job_id)
    assert job["status"] == "pending"
    assert f"{worker.worker_id} quarantined: ECC errors on GPU 0" in job["wait_reason"]

    released = await server.ok("POST", f"{path}/release")
    assert (released["quarantined"], released["quarantine_reason"]) == (False, None)
    assert (await worker.take_job())["job_id"] == job_id
    gone = await server.client.post(f"{path}/release", headers=server.admin)
    assert gone.status == 409
    audit = await server.ok("GET", f"/api/audit?target={worker.worker_id}")
    kinds = [e["kind"] for e in audit["events"]]
    assert "worker.quarantined" in kinds and "worker.released" in kinds
    worker.close()


async def test_quarantining_an_unknown_worker_is_404(server: Any) -> None:
    resp = await server.client.post(
        "/api/admin/workers/w_nope/quarantine", json={}, headers=server.admin
    )
    assert resp.status == 404
