"""Job logs are bounded (issue 23, finding 1): one worker token posting logs stored
1.87 GB in 40 s. Each attempt's log has a quota past which lines are dropped and counted,
the log says so once, posts for an attempt that has ended are refused, and a batch is
held to the same 1 MiB body limit as any request."""

from __future__ import annotations

from typing import Any

from tests.server.protocol import EventStream, WorkerClient
from tests.server.test_api_attempt_fencing import _redispatched
from tunefleet.limits import Limits
from tunefleet.storage.log_quota import LINE_OVERHEAD_BYTES

LINE = "x" * 36  # 100 bytes a line as the quota counts it


async def _post(worker: WorkerClient, job_id: str, batch: int, attempt: int = 1) -> Any:
    resp = await worker.send_logs(job_id, [LINE] * 5, attempt=attempt, first_seq=batch * 5)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_many_posts_stop_at_the_quota_counted_and_said_once(make_server: Any) -> None:
    assert len(LINE) + LINE_OVERHEAD_BYTES == 100
    server = await make_server(limits=Limits(max_log_bytes_per_attempt=1200))
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    answers = [await _post(worker, job_id, batch) for batch in range(20)]
    # 12 lines fit; the rest are dropped, and the answer says so without being an error.
    assert [a["stored"] for a in answers[:4]] == [5, 5, 2, 0]
    assert sum(a["dropped"] for a in answers) == 100 - 12
    assert [a["quota_reached"] for a in answers[:3]] == [False, False, True]
    assert all(a["success"] for a in answers)

    logs = await server.ok("GET", f"/api/queue/{job_id}/logs?limit=5000")
    lines = logs["lines"]
    assert len(lines) == 13  # twelve lines and one marker, not one per dropped batch
    notices = [line for line in lines if line["stream"] == "notice"]
    assert len(notices) == 1 and lines[-1] == notices[0]
    assert "reached its quota of 1200 bytes" in notices[0]["line"]

    (attempt,) = (await server.job(job_id))["attempt_history"]
    assert (attempt["log_bytes"], attempt["log_lines_dropped"]) == (1200, 88)
    # The job itself goes on and ends as usual.
    assert (await worker.report(job_id, "completed")).status == 200
    await server.wait_job(job_id, "completed")
    worker.close()


async def test_the_log_stream_shows_the_marker_once_and_pages_get_no_dropped_lines(
    make_server: Any,
) -> None:
    server = await make_server(limits=Limits(max_log_bytes_per_attempt=700))
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    feed = EventStream(await server.client.get("/api/events?kinds=job_logs", headers=server.admin))
    await feed.expect("hello")
    follow = EventStream(
        await server.client.get(f"/api/queue/{job_id}/logs?follow=true", headers=server.admin)
    )
    for batch in range(4):
        await _post(worker, job_id, batch)
    # Batch 0 stores 5 lines, batch 1 two and the marker; 2 and 3 store nothing: no event.
    first, second = await feed.expect("job_logs"), await feed.expect("job_logs")
    assert (len(first.data["lines"]), len(second.data["lines"])) == (5, 2)
    await worker.report(job_id, "completed")
    kinds = []
    while (frame := await follow.next_event()).event != "end":
        kinds.append(frame.data["stream"])
    assert kinds == ["stdout"] * 7 + ["notice"]
    feed.close()
    follow.close()
    worker.close()


async def test_posts_for_an_ended_job_are_refused_with_409(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await _post(worker, job_id, 0)
    assert (await worker.report(job_id, "completed")).status == 200
    await server.wait_job(job_id, "completed")
    resp = await worker.send_logs(job_id, ["after the end"], first_seq=99)
    assert resp.status == 409
    assert (await resp.json())["detail"] == (
        f"attempt 1 of job {job_id} has ended (the job is completed); stop sending its logs"
    )
    logs = await server.ok("GET", f"/api/queue/{job_id}/logs")
    assert len(logs["lines"]) == 5  # nothing already stored is touched
    worker.close()


async def test_posts_after_the_worker_went_offline_are_refused_with_409(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await server.clock.advance(121)  # past the heartbeat timeout: lost, the job requeued
    await server.wait_worker(worker.worker_id, "offline")
    await server.wait_job(job_id, "pending")
    resp = await worker.send_logs(job_id, ["from a lost worker"])
    assert resp.status == 409
    assert "has ended" in (await resp.json())["detail"]
    worker.close()


async def test_posts_for_an_earlier_attempt_are_refused_with_409(server: Any) -> None:
    worker, job_id = await _redispatched(server)
    resp = await worker.send_logs(job_id, ["late line of attempt 1"], attempt=1)
    assert resp.status == 409
    assert (await resp.json())["detail"] == (
        f"attempt 1 of job {job_id} has ended (the job is on attempt 2); stop sending its logs"
    )
    assert (await worker.send_logs(job_id, ["attempt 2"], attempt=2)).status == 200
    logs = await server.ok("GET", f"/api/queue/{job_id}/logs")
    assert [(line["attempt"], line["line"]) for line in logs["lines"]] == [(2, "attempt 2")]
    worker.close()


async def test_a_log_batch_over_the_body_limit_is_413(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    # 200 lines of 6000 characters: about 1.2 MB, over the 1 MiB the docs promise.
    resp = await worker.send_logs(job_id, ["y" * 6000] * 200)
    assert resp.status == 413
    assert (await resp.json())["detail"] == "request body over 1 MiB; send less"
    assert (await server.ok("GET", f"/api/queue/{job_id}/logs"))["lines"] == []
    worker.close()


async def test_the_body_limit_follows_its_flag(make_server: Any) -> None:
    server = await make_server(limits=Limits(max_body_bytes=2048))
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    resp = await worker.send_logs(job_id, ["z" * 100] * 30)
    assert resp.status == 413
    assert (await resp.json())["detail"] == "request body over 2 KiB; send less"
    worker.close()
