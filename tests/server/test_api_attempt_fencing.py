"""Status reports fenced by attempt: after an acknowledgement timeout the same worker may
get the job again as the next attempt, and a late report on the earlier attempt must be
refused (409) without touching the current one. A report without ``attempt``
(SimpleTuner's agent) is taken as today."""

from __future__ import annotations

from typing import Any

from tests.server.protocol import WorkerClient


async def _redispatched(server: Any) -> tuple[WorkerClient, str]:
    """A job whose first dispatch was never acknowledged, now dispatched to the same
    worker again as attempt 2 (not yet acknowledged)."""
    worker = await server.connected_worker()
    job_id = (await server.submit(target="worker"))["job_id"]
    first = (await worker.stream.expect("job_submit")).data
    assert first["attempt"] == 1
    await server.clock.advance(61)  # past the 60 s acknowledgement timeout
    assert (await worker.stream.expect("job_cancel")).data["job_id"] == job_id
    second = (await worker.stream.expect("job_submit")).data
    assert (second["job_id"], second["attempt"]) == (job_id, 2)
    return worker, job_id


async def test_a_late_report_on_an_earlier_attempt_is_refused_and_changes_nothing(
    server: Any,
) -> None:
    worker, job_id = await _redispatched(server)
    before = await server.job(job_id)
    assert before["status"] == "dispatched"

    resp = await worker.report(job_id, "cancelled", error="stopped", attempt=1)
    assert resp.status == 409
    assert (await resp.json())["detail"] == (
        f"report for attempt 1 of job {job_id}, which is now on attempt 2; abandon attempt 1"
    )
    # Neither acknowledged nor ended: still attempt 2, dispatched, on the same worker.
    after = await server.job(job_id)
    assert after["status"] == "dispatched"
    assert after["worker_id"] == worker.worker_id
    assert [a["number"] for a in after["attempt_history"]] == [1, 2]
    assert after["attempt_history"][1]["started_at"] is None
    assert after["timeline"] == before["timeline"]

    # The current attempt's reports still work, and a stale one stays refused once running.
    assert (await worker.report(job_id, "starting", attempt=2)).status == 200
    await server.wait_job(job_id, "running")
    resp = await worker.report(job_id, "failed", error="late", attempt=1)
    assert resp.status == 409
    assert (await server.job(job_id))["status"] == "running"
    assert (await worker.report(job_id, "completed", attempt=2)).status == 200
    await server.wait_job(job_id, "completed")
    worker.close()


async def test_a_report_without_attempt_is_taken_as_about_the_current_one(server: Any) -> None:
    worker, job_id = await _redispatched(server)
    # SimpleTuner's agent never says which attempt: its report acknowledges attempt 2.
    assert (await worker.report(job_id, "training", progress={"step": 3})).status == 200
    job = await server.wait_job(job_id, "running")
    assert job["progress"] == {"step": 3}
    assert job["attempt_history"][1]["started_at"] is not None
    assert (await worker.report(job_id, "completed")).status == 200
    await server.wait_job(job_id, "completed")
    worker.close()


async def test_a_future_attempt_is_refused_too(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    resp = await worker.report(job_id, "completed", attempt=2)
    assert resp.status == 409
    assert "which is now on attempt 1" in (await resp.json())["detail"]
    assert (await server.job(job_id))["status"] == "running"
    worker.close()
