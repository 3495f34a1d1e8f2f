"""One worker against another: a worker's valid token cannot read, disturb or replay
another worker's stream, nor report on, log to or take over another worker's job. Each
attempt is refused and lands in the audit log; the victim notices nothing."""

from __future__ import annotations

import json
from typing import Any

from tests.server.protocol import WorkerClient

MISMATCH = {"detail": "Worker ID mismatch"}
NOT_ASSIGNED = {"detail": "Worker not assigned to this job"}


async def pair(server: Any) -> tuple[WorkerClient, WorkerClient, str]:
    """The victim runs a job that only it qualifies for; the intruder is idle beside it."""
    victim = await server.connected_worker("victim", labels={"pool": "victim"})
    intruder = await server.connected_worker("intruder", labels={"pool": "intruder"})
    job_id = await server.running_job(victim, worker_labels={"pool": "victim"})
    return victim, intruder, job_id


async def denied_since(server: Any, mark: int) -> list[dict[str, Any]]:
    return [e for e in await server.audit(outcome="denied") if e["id"] > mark]


async def audit_mark(server: Any) -> int:
    return max((e["id"] for e in await server.audit()), default=0)


async def status_and_body(resp: Any) -> tuple[int, Any]:
    body = json.loads(await resp.text())
    resp.close()
    return resp.status, body


async def test_a_worker_cannot_open_replay_or_disturb_anothers_stream(server: Any) -> None:
    victim, intruder, job_id = await pair(server)
    mark = await audit_mark(server)
    for last_event_id in (None, 0, 1):
        stream = await intruder.open_stream(last_event_id, worker_id=victim.worker_id)
        assert (stream.status, await stream.response.json()) == (400, MISMATCH)
        stream.close()
    denied = await denied_since(server, mark)
    assert len(denied) == 3, denied
    assert all(intruder.worker_id in e["detail"]["reason"] for e in denied), denied
    # The victim's stream was not replaced: its next job still arrives there, and
    # nothing of the victim's reaches the intruder's own stream.
    next_job = (await server.submit(target="worker", worker_labels={"pool": "victim"}))["job_id"]
    resp = await victim.report(job_id, "completed")
    assert resp.status == 200
    assert victim.stream is not None and intruder.stream is not None
    event = await victim.stream.expect("job_submit")
    assert event.data["job_id"] == next_job
    await intruder.stream.expect_nothing(0.3)


async def test_a_worker_cannot_report_or_log_anothers_job(server: Any) -> None:
    victim, intruder, job_id = await pair(server)
    before = await server.job(job_id)
    mark = await audit_mark(server)
    for status in ("running", "training", "completed", "failed", "cancelled"):
        resp = await intruder.report(job_id, status, error="forged", progress={"step": 999})
        assert await status_and_body(resp) == (403, NOT_ASSIGNED), status
    resp = await intruder.send_logs(job_id, ["forged line"])
    assert await status_and_body(resp) == (403, NOT_ASSIGNED)
    denied = await denied_since(server, mark)
    assert len(denied) == 6, denied
    assert all(job_id in e["detail"]["reason"] for e in denied), denied
    after = await server.job(job_id)
    assert (after["status"], after["worker_id"], after["progress"], after["error"]) == (
        before["status"],
        victim.worker_id,
        before["progress"],
        before["error"],
    )
    logs = await server.ok("GET", f"/api/queue/{job_id}/logs")
    assert logs["lines"] == []


async def test_a_worker_cannot_speak_for_another_worker(server: Any) -> None:
    """Heartbeat, queue check and disconnect that name the victim are 400 and audited;
    the victim stays connected and busy."""
    victim, intruder, job_id = await pair(server)
    mark = await audit_mark(server)
    other = {"worker_id": victim.worker_id}
    for resp in (
        await intruder.post("/api/workers/heartbeat", {**other, "status": "idle"}),
        await intruder.post("/api/workers/disconnect", other),
        await server.client.get(
            "/api/workers/queue", params={"worker_id": victim.worker_id}, headers=intruder.headers
        ),
    ):
        assert await status_and_body(resp) == (400, MISMATCH)
    assert len(await denied_since(server, mark)) == 3
    view = await server.worker_view(victim.worker_id or "")
    assert (view["status"], view["connected"], view["current_job_id"]) == ("busy", True, job_id)


async def test_a_worker_cannot_claim_anothers_job_by_heartbeat_or_registration(
    server: Any,
) -> None:
    """Naming the victim's job as its own changes nothing of the job: the heartbeat's
    progress is ignored and a registration is told to abandon it."""
    victim, intruder, job_id = await pair(server)
    before = await server.job(job_id)
    resp = await intruder.heartbeat(
        status="busy", current_job_id=job_id, job_progress={"step": 999}
    )
    assert resp.status == 200
    answer = await intruder.register("intruder", current_job_id=job_id)
    assert (answer["resume_job"], answer["abandon_job"]) == (None, job_id)
    await server.settle()
    after = await server.job(job_id)
    assert (after["status"], after["worker_id"], after["progress"]) == (
        "running",
        victim.worker_id,
        before["progress"],
    )
    view = await server.worker_view(intruder.worker_id or "")
    assert view["current_job_id"] is None
