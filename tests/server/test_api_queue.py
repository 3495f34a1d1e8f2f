"""Queue endpoints: submit (by name in both layouts, inline, targets, labels, GPU counts and
why a job waits), list, one job, position, cancel, stats, logs (and following them), and
a job's timeout on the fake clock."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.server.protocol import EventStream, eventually
from tests.server.users_testkit import make_user

# --- submit -----------------------------------------------------------------------------


async def test_submit_by_name_in_simpletuners_folder_layout(server: Any) -> None:
    data = await server.submit(config_name="sdxl-lora", target="worker")
    assert data["success"] is True
    assert data["job_id"].startswith("j_")
    assert (data["status"], data["allocated_worker_id"], data["error"]) == ("pending", None, None)
    assert data["queue_position"] == 1
    job = await server.job(data["job_id"])
    assert job["config_name"] == "sdxl-lora"
    assert job["name"] == "sdxl-lora"
    assert job["config"]["model_type"] == "lora"
    assert job["dataloader"] == [{"id": "pics", "type": "local"}]
    assert job["gpu_count"] == 1  # from the config's --num_processes
    assert job["submitted_by"].startswith("token:admin#")


async def test_submit_by_name_of_a_plain_json_file(server: Any) -> None:
    data = await server.submit(config_name="tiny")
    job = await server.job(data["job_id"])
    assert job["config"] == {"model_type": "full", "max_steps": 10}
    assert job["dataloader"] is None
    assert job["target"] == "auto"  # the default, so the seed's examples run anywhere


async def test_submit_inline_config(server: Any) -> None:
    data = await server.submit(
        config={"model_type": "lora", "num_processes": 2},
        dataloader={"backends": []},
        name="inline-run",
        priority=5,
        max_retries=1,
        env={"WANDB_MODE": "offline"},
    )
    job = await server.job(data["job_id"])
    assert job["config_name"] is None
    assert job["name"] == "inline-run"
    assert (job["gpu_count"], job["priority"], job["max_retries"]) == (2, 5, 1)
    assert job["dataloader"] == {"backends": []}
    assert job["env"] == {"WANDB_MODE": "<hidden>"}


async def test_submit_of_an_unknown_config_name_is_400_and_queues_nothing(server: Any) -> None:
    resp = await server.post("/api/queue/submit", {"config_name": "no-such-config"})
    assert resp.status == 400
    detail = (await resp.json())["detail"]
    assert "no-such-config" in detail and "not found" in detail
    assert "tiny" in detail  # it lists what there is
    assert (await server.ok("GET", "/api/queue"))["total"] == 0
    assert (await server.ok("GET", "/api/queue/stats"))["queue_depth"] == 0


async def test_submit_of_a_config_with_a_bad_num_processes_is_400(server: Any) -> None:
    resp = await server.post(
        "/api/queue/submit", {"config": {"num_processes": "many"}, "target": "worker"}
    )
    assert resp.status == 400
    assert "num_processes" in (await resp.json())["detail"]
    assert (await server.ok("GET", "/api/queue"))["total"] == 0


async def test_submit_target_local_without_a_local_runner_is_400(server: Any) -> None:
    resp = await server.post("/api/queue/submit", {"config_name": "tiny", "target": "local"})
    assert resp.status == 400
    assert "local" in (await resp.json())["detail"]
    assert (await server.ok("GET", "/api/queue"))["total"] == 0


async def test_target_worker_and_auto_go_to_a_remote_worker(server: Any) -> None:
    worker = await server.connected_worker()
    for target in ("worker", "auto"):
        data = await server.submit(target=target)
        assert data["status"] == "dispatched"
        assert data["allocated_worker_id"] == worker.worker_id
        assert data["queue_position"] is None  # it has left the queue
        assert data["reason"] is None
        event = await worker.take_job()
        assert event["requirements"]["target"] == target
        assert (await worker.report(event["job_id"], "completed")).status == 200
        await server.wait_worker(worker.worker_id, "idle")
    worker.close()


async def test_target_local_and_auto_with_the_local_runner(make_server: Any) -> None:
    # Its command is the operator's to allow: by default the local runner runs only trainers.
    server = await make_server(
        local_runner=True, local_allowed_commands=("**",), local_runner_unisolated=True
    )
    command = [sys.executable, "-c", "print('local hello')"]
    data = await server.submit(target="local", command=command)
    job = await server.wait_job(data["job_id"], "completed")
    assert job["worker_id"] == "w_local"
    logs = await server.ok("GET", f"/api/queue/{data['job_id']}/logs")
    assert "local hello" in [line["line"] for line in logs["lines"]]
    # auto prefers a remote worker when one qualifies.
    worker = await server.connected_worker()
    data = await server.submit(target="auto", command=command)
    assert data["allocated_worker_id"] == worker.worker_id
    worker.close()
    # target worker never uses the local runner.
    data = await server.submit(target="worker")
    assert data["allocated_worker_id"] != "w_local"
    # The built-in worker has no token to rotate and cannot be deleted.
    for method, path in (
        ("POST", "/api/admin/workers/w_local/token"),
        ("DELETE", "/api/admin/workers/w_local?force=true"),
    ):
        resp = await server.client.request(method, path, headers=server.admin)
        assert resp.status == 409
        assert "local worker" in (await resp.json())["detail"]
    assert (await server.worker_view("w_local"))["is_local"] is True


async def test_a_misspelt_field_is_400_naming_it_and_nothing_runs(server: Any) -> None:
    """The new user's typo: ``worker_label`` ignored ran the job on a worker its label
    would have kept it off."""
    worker = await server.connected_worker(labels={"team": "vision"})
    body = {"config_name": "tiny", "target": "worker", "worker_label": {"team": "nlp"}}
    resp = await server.post("/api/queue/submit", body)
    assert resp.status == 400
    assert (await resp.json())["detail"] == (
        "unknown field 'worker_label' (did you mean 'worker_labels'?)"
    )
    assert (await server.ok("GET", "/api/queue"))["total"] == 0
    worker.close()


async def test_worker_labels_are_globs(server: Any) -> None:
    worker = await server.connected_worker(labels={"gpu_type": "a100-80g", "team": "nlp"})
    miss = await server.submit(target="worker", worker_labels={"gpu_type": "h100*"})
    assert miss["status"] == "pending"
    assert "gpu_type=h100*" in miss["reason"]
    assert "no worker matches label" in miss["reason"]
    hit = await server.submit(target="worker", worker_labels={"gpu_type": "a100*", "team": "nlp"})
    assert hit["allocated_worker_id"] == worker.worker_id
    assert (await worker.take_job())["job_id"] == hit["job_id"]
    worker.close()


async def test_gpu_count_from_num_processes_and_the_wait_reason(server: Any) -> None:
    two = await server.connected_worker("two-gpus")  # two A100s
    one = await server.connected_worker("one-gpu", gpu_info={"name": "T4", "count": 1})
    data = await server.submit(config_name="multi-gpu")
    assert data["status"] == "pending"
    assert data["reason"] == "needs 4 GPUs; the largest worker has 2"
    job = await server.job(data["job_id"])
    assert job["gpu_count"] == 4
    assert job["wait_reason"] == "needs 4 GPUs; the largest worker has 2"
    position = await server.ok("GET", f"/api/queue/position/{data['job_id']}")
    assert position == {
        "job_id": data["job_id"],
        "position": 1,
        "status": "pending",
        "reason": "needs 4 GPUs; the largest worker has 2",
    }
    two.close()
    one.close()


async def test_wait_reason_with_no_worker_at_all(server: Any) -> None:
    data = await server.submit(target="worker")
    assert data["reason"].startswith("no worker is connected")
    position = await server.ok("GET", f"/api/queue/position/{data['job_id']}")
    assert position["reason"] == data["reason"]


async def test_wait_reason_for_a_label_mismatch_names_the_closest_worker(server: Any) -> None:
    worker = await server.connected_worker(labels={"gpu_type": "a10"})
    data = await server.submit(target="worker", worker_labels={"gpu_type": "a100*"})
    assert data["reason"] == (
        f"no worker matches label gpu_type=a100* (closest: {worker.worker_id} has gpu_type=a10)"
    )
    position = await server.ok("GET", f"/api/queue/position/{data['job_id']}")
    assert position["reason"] == data["reason"]
    worker.close()


async def test_positions_follow_priority_then_submission_order(server: Any) -> None:
    first = (await server.submit(target="worker"))["job_id"]
    second = (await server.submit(target="worker"))["job_id"]
    urgent = await server.submit(target="worker", priority=10)
    assert urgent["queue_position"] == 1
    positions = [
        (await server.ok("GET", f"/api/queue/position/{job_id}"))["position"]
        for job_id in (urgent["job_id"], first, second)
    ]
    assert positions == [1, 2, 3]


async def test_position_is_null_once_the_job_left_the_queue(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    position = await server.ok("GET", f"/api/queue/position/{job_id}")
    assert position == {"job_id": job_id, "position": None, "status": "running", "reason": None}
    assert (await server.job(job_id))["queue_position"] is None
    worker.close()


async def test_position_of_unknown_job_is_404_and_of_a_finished_job_null(server: Any) -> None:
    resp = await server.get("/api/queue/position/j_nope")
    assert resp.status == 404
    assert await resp.json() == {"detail": "Job not found: j_nope"}
    job_id = (await server.submit(target="worker"))["job_id"]
    await server.ok("POST", f"/api/queue/{job_id}/cancel", {})
    position = await server.ok("GET", f"/api/queue/position/{job_id}")
    assert (position["position"], position["status"]) == (None, "cancelled")


# --- list and one job -------------------------------------------------------------------


async def test_list_filters_and_pages_newest_first(server: Any) -> None:
    ids = [(await server.submit(target="worker"))["job_id"] for _ in range(4)]
    local_id = (await server.submit(target="auto"))["job_id"]
    await server.ok("POST", f"/api/queue/{ids[0]}/cancel", {})
    data = await server.ok("GET", "/api/queue")
    assert [j["job_id"] for j in data["jobs"]] == [local_id, *reversed(ids)]
    assert (data["total"], data["limit"], data["offset"]) == (5, 50, 0)
    pending = await server.ok("GET", "/api/queue?status=pending")
    assert pending["total"] == 4
    assert {j["status"] for j in pending["jobs"]} == {"pending"}
    both = await server.ok("GET", "/api/queue?status=pending,cancelled")
    assert both["total"] == 5
    repeated = await server.ok("GET", "/api/queue?status=cancelled&status=pending")
    assert repeated["total"] == 5
    by_target = await server.ok("GET", "/api/queue?target=auto")
    assert [j["job_id"] for j in by_target["jobs"]] == [local_id]
    page1 = await server.ok("GET", "/api/queue?limit=2&offset=0")
    page2 = await server.ok("GET", "/api/queue?limit=2&offset=2")
    page3 = await server.ok("GET", "/api/queue?limit=2&offset=4")
    paged = [j["job_id"] for p in (page1, page2, page3) for j in p["jobs"]]
    assert paged == [local_id, *reversed(ids)]
    assert page1["total"] == page3["total"] == 5


async def test_list_filters_by_worker(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await server.submit(target="worker")
    data = await server.ok("GET", f"/api/queue?worker_id={worker.worker_id}")
    assert [j["job_id"] for j in data["jobs"]] == [job_id]
    worker.close()


@pytest.mark.parametrize(
    "query",
    ["status=sleeping", "limit=0", "limit=501", "offset=-1", "target=moon", "limit=ten"],
)
async def test_list_with_bad_query_is_400(server: Any, query: str) -> None:
    resp = await server.get(f"/api/queue?{query}")
    assert resp.status == 400
    detail = (await resp.json())["detail"]
    assert detail and "\n" not in detail


async def test_one_job_has_its_timeline_and_attempts(server: Any) -> None:
    first = await server.connected_worker("first")
    job_id = await server.running_job(first, config_name="tiny")
    await first.disconnect()  # attempt 1 is lost; the job is requeued
    first.close()
    await server.wait_job(job_id, "pending")
    second = await server.connected_worker("second")
    await second.take_job()
    assert (await second.report(job_id, "completed")).status == 200
    job = await server.wait_job(job_id, "completed")
    assert job["attempts"] == 2
    history = job["attempt_history"]
    assert [(a["number"], a["worker_id"], a["outcome"]) for a in history] == [
        (1, first.worker_id, "lost"),
        (2, second.worker_id, "completed"),
    ]
    assert all(a["dispatched_at"] and a["started_at"] and a["ended_at"] for a in history)
    kinds = [e["kind"] for e in job["timeline"]]
    assert kinds == [
        "submitted",
        "dispatched",
        "started",
        "requeued",
        "dispatched",
        "started",
        "completed",
    ]
    assert job["timeline"][3]["worker_id"] == first.worker_id
    assert job["finished_at"] is not None
    assert job["worker_id"] == second.worker_id
    second.close()


async def test_attempts_that_spent_no_retry_are_counted_apart(server: Any) -> None:
    # Written to the store directly: two dispatches that never reached their worker, a
    # third the worker lost after acknowledging it (an infrastructure failure: it spends
    # --infra-retries) and a fourth from before kinds were stored. No worker is
    # connected, so the jobs stay pending and nothing else writes.
    job_id = (await server.submit(target="worker"))["job_id"]
    other_id = (await server.submit(target="worker"))["job_id"]
    ends = [("undelivered", None), ("undelivered", None), ("lost", "infrastructure")]
    for number, (outcome, kind) in enumerate([*ends, ("lost", None)], start=1):
        await server.store.start_attempt(job_id, number, worker_id="w_gone")
        await server.store.end_attempt(job_id, number, outcome=outcome, kind=kind)
    await server.store.update_job(job_id, attempts=4)
    listed = (await server.ok("GET", "/api/queue"))["jobs"]
    counts = ("attempts", "undelivered", "preempted", "infrastructure_failures")
    assert {j["job_id"]: tuple(j[c] for c in counts) for j in listed} == {
        job_id: (4, 2, 0, 1),
        other_id: (0, 0, 0, 0),
    }
    job = await server.job(job_id)
    assert tuple(job[c] for c in counts) == (4, 2, 0, 1)


async def test_unknown_job_is_404(server: Any) -> None:
    for path in ("/api/queue/j_nope", "/api/queue/j_nope/logs"):
        resp = await server.get(path)
        assert resp.status == 404
        assert await resp.json() == {"detail": "Job not found: j_nope"}


# --- cancel -----------------------------------------------------------------------------


async def test_cancelling_a_pending_job_takes_it_out_of_the_queue(server: Any) -> None:
    job_id = (await server.submit(target="worker"))["job_id"]
    data = await server.ok("POST", f"/api/queue/{job_id}/cancel", {"reason": "wrong config"})
    assert data == {"success": True, "job_id": job_id, "status": "cancelled"}
    assert (await server.ok("GET", "/api/queue/stats"))["queue_depth"] == 0
    # A worker arriving later does not get it.
    worker = await server.connected_worker()
    await worker.stream.expect_nothing()
    job = await server.job(job_id)
    assert job["status"] == "cancelled"
    assert job["timeline"][-1]["kind"] == "cancelled"
    worker.close()


async def test_cancelling_a_running_job_tells_the_agent_and_ends_when_it_reports(
    server: Any,
) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    data = await server.ok("POST", f"/api/queue/{job_id}/cancel", {})
    assert data["status"] == "cancelling"
    cancel = await worker.stream.expect("job_cancel")
    assert cancel.data["job_id"] == job_id
    assert (await server.job(job_id))["status"] == "running"
    assert (await worker.report(job_id, "cancelled")).status == 200
    job = await server.wait_job(job_id, "cancelled")
    assert job["error"].startswith("cancelled by token:admin#")
    await server.wait_worker(worker.worker_id, "idle")
    worker.close()


async def test_cancelled_job_that_the_agent_never_confirms_ends_after_the_grace(
    server: Any,
) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await server.ok("POST", f"/api/queue/{job_id}/cancel", {})
    await worker.stream.expect("job_cancel")
    await worker.heartbeat(status="busy", current_job_id=job_id)
    await server.clock.advance(61)
    job = await server.wait_job(job_id, "cancelled")
    assert "did not confirm" in job["error"]
    worker.close()


async def test_cancel_twice_and_cancel_unknown(server: Any) -> None:
    job_id = (await server.submit(target="worker"))["job_id"]
    await server.ok("POST", f"/api/queue/{job_id}/cancel", {})
    resp = await server.post(f"/api/queue/{job_id}/cancel", {})
    assert resp.status == 409
    assert "already cancelled" in (await resp.json())["detail"]
    resp = await server.post("/api/queue/j_nope/cancel", {})
    assert resp.status == 404
    assert await resp.json() == {"detail": "Job not found: j_nope"}


async def test_cancelling_anothers_job_needs_queue_admin(server: Any) -> None:
    await server.ok("POST", "/api/admin/teams", {"name": "ml"})
    alice = await make_user(server, "alice", "researcher", ["ml"])
    bob = await make_user(server, "bob", "researcher", ["ml"])  # sees the job: a teammate
    boss = server.bearer(await server.api_token("queue.submit", "queue.admin", name="boss"))
    resp = await server.post("/api/queue/submit", {"config_name": "tiny"}, headers=alice)
    job_id = (await resp.json())["job_id"]
    resp = await server.post(f"/api/queue/{job_id}/cancel", {}, headers=bob)
    assert resp.status == 403
    assert (await resp.json())["detail"] == (
        f"Permission denied: job {job_id} is alice (team ml); a researcher may cancel only "
        "their own jobs, a lead their team's, an admin (queue.admin) any"
    )
    assert (await server.job(job_id))["status"] == "pending"
    resp = await server.post(f"/api/queue/{job_id}/cancel", {}, headers=boss)
    assert resp.status == 200


# --- stats ------------------------------------------------------------------------------


async def test_stats_count_jobs_and_workers(server: Any) -> None:
    worker = await server.connected_worker()
    await server.create_worker("waiting")
    running = await server.running_job(worker)
    await server.clock.advance(10)
    await server.submit(target="worker")
    await server.submit(target="worker")
    cancelled = (await server.submit(target="worker"))["job_id"]
    await server.ok("POST", f"/api/queue/{cancelled}/cancel", {})
    stats = await server.ok("GET", "/api/queue/stats")
    assert stats["queue_depth"] == 2
    assert (stats["running"], stats["dispatched"], stats["cancelled"]) == (1, 0, 1)
    assert (stats["completed"], stats["failed"]) == (0, 0)
    assert stats["workers"] == {
        "total": 2,
        "idle": 0,
        "busy": 1,
        "draining": 0,
        "offline": 0,
        "connecting": 1,
    }
    assert stats["avg_wait_seconds"] == 0.0
    assert (await worker.report(running, "completed")).status == 200
    await server.wait_job(running, "completed")
    assert (await server.ok("GET", "/api/queue/stats"))["completed"] == 1
    worker.close()


# --- logs -------------------------------------------------------------------------------


async def test_logs_paging_and_stream_filter(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await worker.send_logs(job_id, [f"line {i}" for i in range(5)])
    body = {"attempt": 1, "lines": [{"seq": 5, "stream": "stderr", "line": "oops", "at": 1.0}]}
    assert (await worker.post(f"/api/workers/job/{job_id}/logs", body)).status == 200
    page = await server.ok("GET", f"/api/queue/{job_id}/logs?limit=2")
    assert [ln["line"] for ln in page["lines"]] == ["line 0", "line 1"]
    rest = await server.ok("GET", f"/api/queue/{job_id}/logs?from_seq={page['next_seq']}")
    assert [ln["line"] for ln in rest["lines"]] == ["line 2", "line 3", "line 4", "oops"]
    errors = await server.ok("GET", f"/api/queue/{job_id}/logs?stream=stderr")
    assert [ln["line"] for ln in errors["lines"]] == ["oops"]
    worker.close()


async def _open_follow(server: Any, job_id: str, query: str = "") -> EventStream:
    resp = await server.client.get(
        f"/api/queue/{job_id}/logs?follow=true{query}", headers=server.admin
    )
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    return EventStream(resp)


async def test_follow_logs_streams_backlog_then_new_lines_until_end(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await worker.send_logs(job_id, ["old 1", "old 2"])
    follow = await _open_follow(server, job_id)
    assert (await follow.expect("log")).data["line"] == "old 1"
    assert (await follow.expect("log")).data["line"] == "old 2"
    await worker.send_logs(job_id, ["new 3"], first_seq=2)
    new = await follow.expect("log")
    assert (new.data["line"], new.data["attempt"]) == ("new 3", 1)
    assert (await worker.report(job_id, "completed")).status == 200
    end = await follow.expect("end")
    assert end.data == {"type": "end", "job_id": job_id, "status": "completed", "error": None}
    await follow.expect_closed()
    worker.close()


async def test_follow_logs_of_a_finished_job_sends_backlog_and_end(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker, max_retries=0)  # a job error: no retry
    await worker.send_logs(job_id, ["only line"])
    assert (await worker.report(job_id, "failed", error="boom")).status == 200
    await server.wait_job(job_id, "failed")
    follow = await _open_follow(server, job_id)
    assert (await follow.expect("log")).data["line"] == "only line"
    end = await follow.expect("end")
    assert (end.data["status"], end.data["error"]) == ("failed", "boom")
    await follow.expect_closed()
    worker.close()


async def test_follow_logs_of_an_unknown_job_is_404(server: Any) -> None:
    resp = await server.get("/api/queue/j_nope/logs?follow=true")
    assert resp.status == 404


# --- timeout ----------------------------------------------------------------------------


async def test_running_job_past_its_timeout_is_cancelled_and_fails(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker, timeout_minutes=1)
    await server.clock.advance(59)
    await worker.stream.expect_nothing()
    await server.clock.advance(2)
    cancel = await worker.stream.expect("job_cancel")
    assert cancel.data["job_id"] == job_id
    assert (await worker.report(job_id, "cancelled")).status == 200
    job = await server.wait_job(job_id, "failed")
    assert job["error"] == "exceeded its timeout of 1 minutes"
    assert job["attempt_history"][0]["outcome"] == "failed"
    worker.close()


async def test_timeout_when_the_agent_never_confirms(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker, timeout_minutes=0.5)
    await server.clock.advance(31)
    await worker.stream.expect("job_cancel")
    await worker.heartbeat(status="busy", current_job_id=job_id)
    await server.clock.advance(61)

    async def failed() -> Any:
        job = await server.job(job_id)
        return job if job["status"] == "failed" else None

    job = await eventually(failed, "the job to fail")
    assert job["error"].startswith("exceeded its timeout of 0.5 minutes")
    await server.wait_worker(worker.worker_id, "idle")
    worker.close()


async def test_follow_logs_seq_is_one_cursor_for_backlog_and_live_lines(server: Any) -> None:
    """Every `log` event carries the stored line's seq (and the SSE id), so a follower that
    reconnects with from_seq=<last seq + 1> misses and repeats nothing."""
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    # Another job's lines first, so stored seqs differ from the agent's own numbering.
    other = await server.connected_worker("other")
    other_job = await server.running_job(other)
    await other.send_logs(other_job, ["elsewhere 1", "elsewhere 2"])
    await worker.send_logs(job_id, ["old 1"])
    follow = await _open_follow(server, job_id)
    old = await follow.expect("log")
    await worker.send_logs(job_id, ["new 2", "new 3"], first_seq=1)
    new2 = await follow.expect("log")
    new3 = await follow.expect("log")
    follow.close()
    seqs = [old.data["seq"], new2.data["seq"], new3.data["seq"]]
    assert [f.id for f in (old, new2, new3)] == [str(s) for s in seqs]
    stored = await server.ok("GET", f"/api/queue/{job_id}/logs")
    assert [ln["seq"] for ln in stored["lines"]] == seqs
    rest = await server.ok("GET", f"/api/queue/{job_id}/logs?from_seq={seqs[1]}")
    assert [ln["line"] for ln in rest["lines"]] == ["new 2", "new 3"]
    assert new2.data["at"] == stored["lines"][1]["at"]
    worker.close()
    other.close()


async def test_cancelling_a_dispatched_job_before_it_is_acknowledged(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = (await server.submit(target="worker"))["job_id"]
    await worker.stream.expect("job_submit")
    data = await server.ok("POST", f"/api/queue/{job_id}/cancel", {})
    assert data["status"] == "cancelling"
    assert (await worker.stream.expect("job_cancel")).data["job_id"] == job_id
    # The agent never acknowledges; past the acknowledgement timeout the job is not
    # requeued but ends as it was asked to.
    await worker.heartbeat()
    await server.clock.advance(61)
    job = await server.wait_job(job_id, "cancelled")
    assert job["attempts"] == 1
    # Nothing but stop notices for that job follows; it is never sent again.
    for _ in range(3):
        try:
            frame = await worker.stream.next_event(0.2)
        except AssertionError:
            break  # quiet
        assert (frame.type, frame.data["job_id"]) == ("job_cancel", job_id)
    assert (await server.job(job_id))["status"] == "cancelled"
    worker.close()


async def test_the_cancel_reason_is_kept(server: Any) -> None:
    job_id = (await server.submit(target="worker"))["job_id"]
    await server.ok("POST", f"/api/queue/{job_id}/cancel", {"reason": "wrong config"})
    job = await server.job(job_id)
    assert "wrong config" in job["error"]
    assert job["error"].startswith("cancelled by token:admin#")
    assert job["timeline"][-1]["detail"]["reason"] == job["error"]


async def test_a_job_out_of_retries_fails_with_the_reason(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker, max_retries=1)
    assert (await worker.report(job_id, "failed", error="exit code 1: KeyError: 'x'")).status == 200
    # Its only worker: the retry comes back to it (there is no other to prefer).
    assert (await worker.take_job())["job_id"] == job_id
    assert (await worker.report(job_id, "failed", error="exit code 1: KeyError: 'y'")).status == 200
    job = await server.wait_job(job_id, "failed")
    assert job["error"] == "exit code 1: KeyError: 'y'; no retries left (max_retries=1)"
    assert [a["kind"] for a in job["attempt_history"]] == ["job_error", "job_error"]
    worker.close()


async def test_higher_priority_is_dispatched_first(server: Any) -> None:
    low = (await server.submit(target="worker"))["job_id"]
    high = (await server.submit(target="worker", priority=50))["job_id"]
    worker = await server.connected_worker()
    assert (await worker.take_job())["job_id"] == high
    assert (await worker.report(high, "completed")).status == 200
    assert (await worker.take_job())["job_id"] == low
    worker.close()
