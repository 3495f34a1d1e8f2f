"""GPU health through the API: a heartbeat's gpu_health reading is judged, shown on the
worker, audited and counted once per change of level; an unhealthy worker takes no new
job (its current one goes on), the job goes to another worker or waits with the reason,
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


async def test_an_unhealthy_worker_takes_no_job_and_the_wait_reason_says_why(
    server: Any,
) -> None:
    sick = await server.connected_worker("sick")
    await beat(sick, GOOD)
    await beat(sick, with_gpu1(xids=[79]))
    view = await server.worker_view(sick.worker_id)
    assert (view["health"], view["health_reason"]) == ("unhealthy", "Xid 79 on GPU 1")
    assert view["status"] == "idle" and view["connected"]  # stays connected, just held

    waiting = await server.submit(target="worker")
    assert waiting["status"] == "pending"
    assert waiting["reason"] == f"{sick.worker_id} unhealthy: Xid 79 on GPU 1"
    # A healthy worker arrives: the job goes there.
    healthy = await server.connected_worker("healthy")
    assert (await healthy.take_job())["job_id"] == waiting["job_id"]
    await sick.stream.expect_nothing()

    # Audited and counted once per change of level, not per heartbeat.
    await beat(sick, with_gpu1(xids=[79]))
    await beat(sick, with_gpu1(xids=[79, 48]))
    events = await server.audit(kind="worker.health", target=sick.worker_id)
    assert [(e["detail"]["health"], e["detail"]["was"]) for e in events] == [
        ("unhealthy", "healthy"),
        ("healthy", None),
    ]
    # Newest first; the reason is the one when the level changed.
    assert events[0]["detail"]["reason"] == "Xid 79 on GPU 1"
    metrics = await (await server.client.get("/metrics", headers=server.admin)).text()
    assert 'tunefleet_worker_health_changes_total{health="unhealthy"} 1.0' in metrics

    # Healthy again (the agent restarted after a reset): it takes jobs again.
    await beat(sick, GOOD)
    assert (await server.worker_view(sick.worker_id))["health"] == "healthy"
    job = await server.submit(target="worker")
    assert (await sick.take_job())["job_id"] == job["job_id"]
    sick.close()
    healthy.close()


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
    assert "unhealthy: GPU-b missing since registration" in nxt["reason"]
    worker.close()


async def test_an_unreadable_reading_is_ignored_not_refused(server: Any) -> None:
    worker = await server.connected_worker()
    for junk in ("sick", 5, {"gpus": "all"}, {"gpus": [{"index": -1}]}):
        await beat(worker, junk)
    view = await server.worker_view(worker.worker_id)
    assert view["health"] in (None, "healthy")
    worker.close()
