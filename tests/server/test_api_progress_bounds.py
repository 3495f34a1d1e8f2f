"""A job's progress is bounded in keys and bytes, and live pages are sent what changed
(issue 23, finding 3): a worker naming new keys in every report grew one object without
end, and each report sent all of it again to every open page."""

from __future__ import annotations

import json
from typing import Any

from tests.server.protocol import EventStream, eventually
from tunefleet.limits import Limits


async def _feed(server: Any) -> EventStream:
    resp = await server.client.get("/api/events?kinds=job_progress", headers=server.admin)
    feed = EventStream(resp)
    await feed.expect("hello")
    return feed


async def test_new_keys_past_the_bound_are_refused_whole_and_what_is_stored_stays(
    make_server: Any,
) -> None:
    server = await make_server(limits=Limits(max_progress_keys=6))
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    statuses = []
    for report in range(8):
        resp = await worker.report(
            job_id, "running", progress={"step": report, f"a{report}": 1, f"b{report}": 2}
        )
        statuses.append(resp.status)
        if resp.status == 400:
            detail = (await resp.json())["detail"]
            assert "over the server's limit of 6 (--max-progress-keys)" in detail
    assert statuses == [200, 200, 400, 400, 400, 400, 400, 400]
    job = await server.job(job_id)
    assert job["progress"] == {"step": 1, "a0": 1, "b0": 2, "a1": 1, "b1": 2}
    # Keys already held may change; the job still ends with its report.
    assert (await worker.report(job_id, "running", progress={"step": 9})).status == 200
    final = await worker.report(job_id, "completed", progress={"new": 1, "newer": 2})
    assert final.status == 200
    ended = await server.wait_job(job_id, "completed")
    assert ended["progress"] == {"step": 9, "a0": 1, "b0": 2, "a1": 1, "b1": 2}
    worker.close()


async def test_progress_past_its_bytes_is_refused(make_server: Any) -> None:
    server = await make_server(limits=Limits(max_progress_bytes=200))
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    assert (await worker.report(job_id, "running", progress={"a": "x" * 100})).status == 200
    resp = await worker.report(job_id, "running", progress={"b": "y" * 100})
    assert resp.status == 400
    assert "--max-progress-bytes" in (await resp.json())["detail"]
    assert (await server.job(job_id))["progress"] == {"a": "x" * 100}
    worker.close()


async def test_a_page_is_sent_the_keys_a_report_changed_not_the_whole_progress(
    server: Any,
) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    big = {f"metric_{i}": i for i in range(50)}
    assert (await worker.report(job_id, "running", progress={"step": 1, **big})).status == 200
    feed = await _feed(server)
    await worker.report(job_id, "running", progress={"step": 2, **big})
    event = await feed.expect("job_progress")
    assert event.data["job_id"] == job_id and event.data["attempt"] == 1
    assert event.data["progress"] == {"step": 2}
    # A report that changes nothing (a heartbeat repeating it) sends nothing: the next
    # event is the next change.
    await worker.report(job_id, "running", progress={"step": 2, **big})
    await worker.report(job_id, "running", progress={"step": 3, "metric_7": 0.5})
    event = await feed.expect("job_progress")
    assert event.data["progress"] == {"step": 3, "metric_7": 0.5}
    assert len(json.dumps(event.data)) < 200
    # The whole object stays readable where it was.
    job = await server.job(job_id)
    assert job["progress"] == {**big, "step": 3, "metric_7": 0.5}
    feed.close()
    worker.close()


async def test_a_heartbeats_progress_past_the_bound_is_left_out_and_the_heartbeat_taken(
    make_server: Any,
) -> None:
    server = await make_server(limits=Limits(max_progress_keys=3))
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    assert (await worker.report(job_id, "running", progress={"step": 1})).status == 200
    beat = await worker.heartbeat(
        status="busy", current_job_id=job_id, job_progress={"step": 2, "a": 1, "b": 2, "c": 3}
    )
    assert beat.status == 200
    # A later heartbeat's progress is taken: once it shows, the one before was handled.
    beat = await worker.heartbeat(status="busy", current_job_id=job_id, job_progress={"step": 3})
    assert beat.status == 200

    async def progress_now() -> dict[str, Any] | None:
        progress = (await server.job(job_id))["progress"]
        return progress if progress["step"] == 3 else None

    assert await eventually(progress_now, "the second heartbeat's progress") == {"step": 3}
    worker.close()
