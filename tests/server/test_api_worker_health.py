"""GPU health through the API: a heartbeat's gpu_health reading is judged, shown on the
worker, audited and counted once per change of level; a reading that turns unhealthy
quarantines the worker (its current job goes on), the job goes to another worker or
waits with the reason, GPUs that read healthy again do not release it (an admin does),
and a worker whose agent sends no reading (SimpleTuner's) has no health at all."""

from __future__ import annotations

from typing import Any

from tests.server.protocol import WorkerClient, eventually

GOOD = {
    "gpus": [
        {"index": 0, "uuid": "GPU-a", "ecc_uncorrectable": 0, "temperature_c": 40, "xids": []},
        {"index": 1, "uuid": "GPU-b", "ecc_uncorrectable": 0, "temperature_c": 41, "xids": []},
    ],
    "missing": [],
    "registered": 2,
}


def with_gpu1(**fields: Any) -> dict[str, Any]:
    gpus = [dict(GOOD["gpus"][0]), {**GOOD["gpus"][1], **fields}]
    return {**GOOD, "gpus": gpus}


async def beat(worker: WorkerClient, reading: Any, **fields: Any) -> None:
    resp = await worker.heartbeat(gpu_health=reading, **fields)
    assert resp.status == 200, await resp.text()


async def test_a_reading_is_shown_and_simpletuners_agent_has_no_health(server: Any) -> None:
    tunefleet_agent = await server.connected_worker("tf")
    simpletuner = await server.connected_worker("st")
    await beat(tunefleet_agent, with_gpu1(temperature_c=88, ecc_uncorrectable=None))
    await simpletuner.heartbeat()
    view = await server.worker_view(tunefleet_agent.worker_id)
    assert (view["health"], view["health_reason"]) == ("degraded", "GPU 1 at 88 °C")
    assert view["gpu_health"]["gpus"][1]["ecc_uncorrectable"] is None  # unknown stays so
    assert view["gpu_health"]["gpus"][1]["temperature_c"] == 88.0
    other = await server.worker_view(simpletuner.worker_id)
    assert (other["health"], other["health_reason"], other["gpu_health"]) == (None, None, None)
    listed = {w["worker_id"]: w for w in (await server.ok("GET", "/api/admin/workers"))["workers"]}
    assert listed[tunefleet_agent.worker_id]["health"] == "degraded"
    # Degraded still dispatches.
    job_id = (await server.submit(target="worker", gpu_count=2))["job_id"]
    assert (await server.job(job_id))["worker_id"] in {
        tunefleet_agent.worker_id,
        simpletuner.worker_id,
    }


async def test_an_unhealthy_reading_quarantines_the_worker_until_an_admin_releases_it(
    server: Any,
) -> None:
    sick = await server.connected_worker("sick")
    await beat(sick, GOOD)
    await beat(sick, with_gpu1(xids=[79]))
    view = await server.worker_view(sick.worker_id)
    assert (view["health"], view["health_reason"]) == ("unhealthy", "Xid 79 on GPU 1")
    assert view["status"] == "idle" and view["connected"]  # stays connected, just held
    assert view["quarantined"]
    assert view["quarantine_reason"] == "GPU health: Xid 79 on GPU 1"

    waiting = await server.submit(target="worker")
    assert waiting["status"] == "pending"
    assert waiting["reason"] == f"{sick.worker_id} quarantined: GPU health: Xid 79 on GPU 1"
    # A healthy worker arrives: the job goes there.
    healthy = await server.connected_worker("healthy")
    assert (await healthy.take_job())["job_id"] == waiting["job_id"]
    await sick.stream.expect_nothing()

    # Audited and counted once per change of level, not per heartbeat; quarantined once,
    # by the orchestrator.
    await beat(sick, with_gpu1(xids=[79]))
    await beat(sick, with_gpu1(xids=[79, 48]))
    events = await server.audit(kind="worker.health", target=sick.worker_id)
    assert [(e["detail"]["health"], e["detail"]["was"]) for e in events] == [
        ("unhealthy", "healthy"),
        ("healthy", None),
    ]
    # Newest first; the reason is the one when the level changed.
    assert events[0]["detail"]["reason"] == "Xid 79 on GPU 1"
    quarantined = await server.audit(kind="worker.quarantined", target=sick.worker_id)
    assert [(e["actor"], e["detail"]["reason"]) for e in quarantined] == [
        ("orchestrator", "GPU health: Xid 79 on GPU 1")
    ]
    metrics = await (await server.client.get("/metrics", headers=server.admin)).text()
    assert 'tunefleet_worker_health_changes_total{health="unhealthy"} 1.0' in metrics
    assert 'tunefleet_worker_quarantines_total{how="automatic"} 1.0' in metrics

    # Healthy again (the agent restarted after a reset): shown, but still quarantined:
    # a machine that threw an Xid is looked at before it takes jobs again.
    await beat(sick, GOOD)
    view = await server.worker_view(sick.worker_id)
    assert (view["health"], view["quarantined"]) == ("healthy", True)
    job = await server.submit(target="worker")
    assert job["status"] == "pending"
    await sick.stream.expect_nothing()
    # An admin releases it: it takes the waiting job.
    await server.ok("POST", f"/api/admin/workers/{sick.worker_id}/release")
    assert (await sick.take_job())["job_id"] == job["job_id"]
    sick.close()
    healthy.close()


async def test_a_worker_released_while_unhealthy_is_quarantined_again_at_the_next_fault(
    server: Any,
) -> None:
    worker = await server.connected_worker()
    await beat(worker, with_gpu1(xids=[79]))
    path = f"/api/admin/workers/{worker.worker_id}"
    assert (await server.worker_view(worker.worker_id))["quarantined"]
    # The admin's word: released while its reading is still unhealthy, it takes jobs.
    await server.ok("POST", f"{path}/release")
    await beat(worker, with_gpu1(xids=[79]))
    assert not (await server.worker_view(worker.worker_id))["quarantined"]
    job = await server.submit(target="worker")
    assert (await worker.take_job())["job_id"] == job["job_id"]
    # An admin's quarantine already in force is left as it is (no 409, no second one).
    await server.ok("POST", f"{path}/quarantine", {"reason": "RMA"})
    await beat(worker, GOOD, status="busy", current_job_id=job["job_id"])
    await beat(worker, with_gpu1(xids=[48]), status="busy", current_job_id=job["job_id"])
    view = await server.worker_view(worker.worker_id)
    assert (view["quarantine_reason"], view["current_job_id"]) == ("RMA", job["job_id"])
    # Healthy, then unhealthy again after a release: quarantined again.
    await server.ok("POST", f"{path}/release")
    await beat(worker, GOOD, status="busy", current_job_id=job["job_id"])
    await beat(worker, with_gpu1(xids=[48]), status="busy", current_job_id=job["job_id"])
    view = await server.worker_view(worker.worker_id)
    assert view["quarantine_reason"] == "GPU health: Xid 48 on GPU 1"
    worker.close()


async def test_a_busy_worker_that_turns_unhealthy_keeps_its_job(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await beat(worker, {**GOOD, "missing": ["GPU-b"]}, status="busy", current_job_id=job_id)
    view = await server.worker_view(worker.worker_id)
    assert view["health_reason"] == "GPU-b missing since registration"
    assert view["current_job_id"] == job_id
    assert (await worker.report(job_id, "completed")).status == 200
    await server.wait_job(job_id, "completed")

    async def idle() -> bool:
        return (await server.worker_view(worker.worker_id))["status"] == "idle"

    await eventually(idle, "the worker to be free")
    nxt = await server.submit(target="worker")
    assert nxt["status"] == "pending"
    assert "quarantined: GPU health: GPU-b missing since registration" in nxt["reason"]
    worker.close()


async def test_an_unreadable_reading_is_ignored_not_refused(server: Any) -> None:
    worker = await server.connected_worker()
    for junk in ("sick", 5, {"gpus": "all"}, {"gpus": [{"index": -1}]}):
        await beat(worker, junk)
    view = await server.worker_view(worker.worker_id)
    assert view["health"] in (None, "healthy")
    worker.close()
