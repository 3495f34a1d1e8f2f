"""Worker endpoints exactly as shared/PROTOCOL.md records them: register (both GPU spellings,
SimpleTuner's agent's body, labels, resume/abandon), the SSE stream's framing, pings and
Last-Event-ID, heartbeat, job status and logs, the queue check and disconnect."""

from __future__ import annotations

import json
import re
import socket
from typing import Any

import pytest

from tests.server.protocol import WorkerClient, eventually
from tunefleet.http import keys

# SimpleTuner's agent (simpletuner/worker_agent.py) sends exactly these bodies.
SIMPLETUNER_REGISTER = {
    "name": "st-box",
    "gpu_info": {
        "name": "NVIDIA A100-SXM4-80GB",
        "vram_gb": 79.2,
        "count": 2,
        "driver": "12.4",
        "accelerator": "cuda",
    },
    "persistent": False,
    "current_job_id": None,
}
SIMPLETUNER_NO_GPU = {"name": "Unknown", "vram_gb": None, "count": 0, "accelerator": None}


# --- register ---------------------------------------------------------------------------


async def test_register_simpletuner_body_answers_the_protocol(server: Any) -> None:
    worker = await server.create_worker("st-box", worker_type="ephemeral")
    resp = await worker.post("/api/workers/register", SIMPLETUNER_REGISTER)
    assert resp.status == 200
    data = await resp.json()
    assert data == {
        "worker_id": worker.worker_id,
        "sse_url": f"/api/workers/stream?worker_id={worker.worker_id}",
        "resume_job": None,
        "abandon_job": None,
        # tunefleet's additions, which SimpleTuner's agent does not read.
        "name": "st-box",
        "worker_type": "ephemeral",
        "warnings": [],
    }
    view = await server.worker_view(worker.worker_id)
    assert view["status"] == "idle"
    assert (view["gpu_count"], view["gpu_name"], view["gpu_vram_gb"]) == (
        2,
        "NVIDIA A100-SXM4-80GB",
        79.2,
    )
    assert view["accelerator_type"] == "cuda"
    assert view["gpu_info"]["count"] == 2
    assert view["gpu_info"]["driver"] == "12.4"


async def test_register_simpletuner_agent_without_gpu(server: Any) -> None:
    worker = await server.create_worker("cpu-box")
    data = await worker.register("cpu-box", gpu_info=SIMPLETUNER_NO_GPU)
    view = await server.worker_view(data["worker_id"])
    assert view["gpu_count"] == 0
    assert view["gpu_vram_gb"] is None


async def test_register_flat_gpu_spelling_is_stored_as_one(server: Any) -> None:
    worker = await server.create_worker("flat")
    body = {
        "name": "flat",
        "gpu_count": 4,
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "gpu_vram_gb": 80,
        "accelerator_type": "cuda",
    }
    resp = await worker.post("/api/workers/register", body)
    assert resp.status == 200
    view = await server.worker_view(worker.worker_id)
    assert (view["gpu_count"], view["gpu_name"], view["gpu_vram_gb"]) == (
        4,
        "NVIDIA H100 80GB HBM3",
        80.0,
    )
    assert view["gpu_info"]["count"] == 4
    assert view["gpu_info"]["name"] == "NVIDIA H100 80GB HBM3"
    assert view["accelerator_type"] == "cuda"


async def test_register_reads_json_whatever_the_content_type(server: Any) -> None:
    """The seed's curl examples send JSON as form data (no JSON Content-Type)."""
    worker = await server.create_worker("curl")
    resp = await server.client.post(
        "/api/workers/register",
        data=json.dumps({"name": "curl", "gpu_count": 1}).encode(),
        headers={**worker.headers, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert resp.status == 200
    assert (await server.worker_view(worker.worker_id))["gpu_count"] == 1


async def test_admin_labels_are_kept_when_the_agent_sends_none(server: Any) -> None:
    worker = await server.create_worker("lab", labels={"gpu_type": "a100", "site": "dc-a"})
    await worker.register("lab")  # SimpleTuner's agent sends no labels at all
    view = await server.worker_view(worker.worker_id)
    assert view["labels"] == {"gpu_type": "a100", "site": "dc-a"}

    await worker.register("lab", labels={"gpu_type": "h100", "team": "nlp"})
    view = await server.worker_view(worker.worker_id)
    # What an admin assigned wins; what the agent adds is kept beside it.
    assert view["labels"] == {"gpu_type": "a100", "site": "dc-a", "team": "nlp"}
    assert view["agent_labels"] == {"gpu_type": "h100", "team": "nlp"}

    await worker.register("lab")
    view = await server.worker_view(worker.worker_id)
    assert view["labels"] == {"gpu_type": "a100", "site": "dc-a"}


async def test_admin_labels_survive_a_restart(make_server: Any) -> None:
    first = await make_server()
    worker = await first.create_worker("lab", labels={"gpu_type": "a100"})
    await worker.register("lab")
    await first.client.close()
    second = await make_server()
    view = await second.worker_view(worker.worker_id)
    assert view["labels"] == {"gpu_type": "a100"}


async def test_reregister_with_the_running_job_resumes_it(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker, config_name="tiny")
    worker.close()
    data = await worker.register(current_job_id=job_id)
    assert data["resume_job"] == {"job_id": job_id, "config_name": "tiny", "status": "running"}
    assert data["abandon_job"] is None
    stream = await worker.open_stream()
    await stream.expect_nothing()  # no second job_submit for a job it kept
    assert (await server.job(job_id))["status"] == "running"
    assert (await server.worker_view(worker.worker_id))["status"] == "busy"
    resp = await worker.report(job_id, "completed")
    assert resp.status == 200
    await server.wait_job(job_id, "completed")
    worker.close()


async def test_reregister_with_an_ended_job_abandons_it(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    assert (await worker.report(job_id, "completed")).status == 200
    await server.wait_job(job_id, "completed")
    worker.close()
    data = await worker.register(current_job_id=job_id)
    assert data["abandon_job"] == job_id
    assert data["resume_job"] is None
    assert (await server.worker_view(worker.worker_id))["status"] == "idle"


async def test_reregister_with_a_job_given_to_another_worker_abandons_it(server: Any) -> None:
    first = await server.connected_worker("first")
    job_id = await server.running_job(first)
    first.close()
    assert (await first.disconnect()).status == 200  # lost: the job goes back to the queue
    second = await server.connected_worker("second")
    event = await second.take_job()
    assert event["job_id"] == job_id
    data = await first.register("first", current_job_id=job_id)
    assert data["abandon_job"] == job_id
    assert data["resume_job"] is None
    job = await server.job(job_id)
    assert (job["status"], job["worker_id"]) == ("running", second.worker_id)
    second.close()


async def test_reregister_without_its_running_job_requeues_it(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    worker.close()
    data = await worker.register(current_job_id=None)
    assert data == {**data, "resume_job": None, "abandon_job": None}
    job = await server.wait_job(job_id, "pending")
    assert job["attempt_history"][0]["outcome"] == "lost"


async def test_reregister_with_an_undelivered_dispatch_sends_it_again(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = (await server.submit(target="worker"))["job_id"]
    first = await worker.stream.expect("job_submit")
    worker.close()  # the agent never acknowledged it
    await worker.register(current_job_id=None)
    stream = await worker.open_stream(last_event_id=first.id)
    again = await stream.expect("job_submit")
    assert again.data["job_id"] == job_id
    assert (await worker.report(job_id, "starting")).status == 200
    await server.wait_job(job_id, "running")
    worker.close()


# --- the stream -------------------------------------------------------------------------


async def test_stream_frames_each_event_with_event_id_and_one_data_line(server: Any) -> None:
    worker = await server.connected_worker()
    stream = worker.stream
    assert stream.response.headers["Content-Type"].startswith("text/event-stream")
    job_id = (await server.submit(config_name="sdxl-lora", target="worker"))["job_id"]
    frame = await stream.expect("job_submit")
    # The raw bytes: `id:`, `event:`, exactly one `data: ` line (with the space), blank line.
    lines = re.split(rb"\r\n|\n|\r", frame.raw)
    assert [ln.split(b":", 1)[0] for ln in lines] == [b"id", b"event", b"data"]
    assert lines[1] == b"event: job_submit"
    assert lines[2].startswith(b"data: {")
    assert re.fullmatch(rb"id: \d+", lines[0])
    data = frame.data
    assert data["type"] == "job_submit"
    assert data["job_id"] == job_id
    assert data["config"]["model_type"] == "lora"
    assert data["dataloader"] == [{"id": "pics", "type": "local"}]
    # SimpleTuner's agent reads these unconditionally (a null token breaks it) and puts
    # its orchestrator URL in front of the endpoint, so it is a path.
    assert data["upload_endpoint"] == "/api/artifacts"
    assert isinstance(data["upload_token"], str) and data["upload_token"].startswith("ut_")
    assert {"provider", "hf_token", "attempt", "command", "env", "requirements"} <= set(data)
    assert data["attempt"] == 1
    assert b"\n\n" in bytes(stream.raw).replace(b"\r\n", b"\n")
    worker.close()


async def test_stream_ids_increase_per_worker(server: Any) -> None:
    worker = await server.connected_worker()
    first_job = await server.running_job(worker)
    assert (await server.post(f"/api/queue/{first_job}/cancel", {})).status == 200
    cancel = await worker.stream.expect("job_cancel")
    assert cancel.data == {**cancel.data, "type": "job_cancel", "job_id": first_job}
    assert (await worker.report(first_job, "cancelled")).status == 200
    second_job = (await server.submit(target="worker"))["job_id"]
    second = await worker.stream.expect("job_submit")
    assert second.data["job_id"] == second_job
    assert int(second.id) > int(cancel.id)
    worker.close()


async def test_stream_sends_ping_events_when_idle(server: Any) -> None:
    server.set_ping_interval(0.05)
    worker = await server.connected_worker()
    frame = await worker.stream.next_frame()
    assert frame.event == "ping"
    assert frame.data == {"type": "ping"}
    assert frame.id is None  # pings are not kept for replay
    assert frame.data_lines[0].startswith("{")
    worker.close()


@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="Linux-only socket option")
async def test_stream_socket_gives_up_on_a_silent_peer_after_two_ping_intervals(
    server: Any,
) -> None:
    # A vanished machine (no FIN, no RST) must not look connected for TCP's ~15 minutes
    # of retransmissions; the kernel fails the socket instead (tests/chaos proves the
    # whole path with a real network cut).
    server.set_ping_interval(7.0)
    worker = await server.connected_worker()
    [transport] = server.app[keys.OPEN_STREAMS].transports()
    sock = transport.get_extra_info("socket")
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 14_000
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 7
    worker.close()


async def test_last_event_id_replays_only_unacknowledged_events(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = (await server.submit(target="worker"))["job_id"]
    submit = await worker.stream.expect("job_submit")
    worker.close()
    # Reconnecting from before the event: it comes again, same id.
    stream = await worker.open_stream(last_event_id=int(submit.id) - 1)
    again = await stream.expect("job_submit")
    assert (again.id, again.data["job_id"]) == (submit.id, job_id)
    stream.close()
    # Reconnecting from that very id: nothing new.
    stream = await worker.open_stream(last_event_id=submit.id)
    await stream.expect_nothing()
    # Once acknowledged, not even a reconnect from zero replays it.
    assert (await worker.report(job_id, "starting")).status == 200
    stream.close()
    stream = await worker.open_stream(last_event_id=0)
    await stream.expect_nothing()
    stream.close()


async def test_a_new_stream_replaces_the_old_one(server: Any) -> None:
    worker = await server.connected_worker()
    old = worker.stream
    new = await worker.open_stream()
    await old.expect_closed()
    job_id = (await server.submit(target="worker"))["job_id"]
    assert (await new.expect("job_submit")).data["job_id"] == job_id
    new.close()


async def test_stream_for_another_worker_id_is_400_mismatch(server: Any) -> None:
    worker = await server.connected_worker("a")
    other = await server.create_worker("b")
    stream = await worker.open_stream(worker_id=other.worker_id)
    assert stream.status == 400
    assert await stream.response.json() == {"detail": "Worker ID mismatch"}
    # The open stream of the token's own worker is untouched.
    assert (await server.worker_view(worker.worker_id))["connected"] is True
    worker.close()


async def test_stream_closes_when_the_worker_is_deleted(server: Any) -> None:
    worker = await server.connected_worker()
    resp = await server.delete(f"/api/admin/workers/{worker.worker_id}?force=true")
    assert resp.status == 200
    shutdown = await worker.stream.expect("shutdown")
    assert shutdown.data["reason"]  # at the top level, where SimpleTuner's agent reads it
    await worker.stream.expect_closed()


# --- heartbeat --------------------------------------------------------------------------


async def test_heartbeat_records_samples_and_keeps_the_worker_alive(server: Any) -> None:
    worker = await server.connected_worker()
    await server.clock.advance(100)
    resp = await worker.heartbeat(status="idle", gpu_utilization=[97.5, 12], vram_used_gb=70.1)
    assert resp.status == 200
    assert await resp.json() == {"success": True}
    await server.clock.advance(100)  # 200 s since register, 100 s since the heartbeat
    view = await server.worker_view(worker.worker_id)
    assert view["status"] == "idle"
    assert view["gpu_utilization"] == [97.5, 12.0]
    assert view["vram_used_gb"] == [70.1]
    assert view["last_heartbeat"] == "2023-11-14T22:15:00.000Z"  # start + 100 s
    await server.clock.advance(21)
    await server.wait_worker(worker.worker_id, "offline")
    worker.close()


async def test_simpletuner_heartbeat_body_and_progress(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    resp = await worker.post(
        "/api/workers/heartbeat",
        {"worker_id": worker.worker_id, "status": "busy", "current_job_id": job_id},
    )
    assert resp.status == 200
    resp = await worker.heartbeat(
        status="busy", current_job_id=job_id, job_progress={"step": 5, "total": 10}
    )
    assert resp.status == 200

    async def progress() -> Any:
        return (await server.job(job_id))["progress"]

    assert await eventually(progress, "progress from the heartbeat") == {"step": 5, "total": 10}
    worker.close()


async def test_heartbeat_from_an_offline_worker_is_409(server: Any) -> None:
    worker = await server.connected_worker()
    worker.close()
    assert (await worker.disconnect()).status == 200
    resp = await worker.heartbeat()
    assert resp.status == 409
    assert "register again" in (await resp.json())["detail"]
    assert (await server.worker_view(worker.worker_id))["status"] == "offline"


async def test_heartbeat_for_another_worker_id_is_400_mismatch(server: Any) -> None:
    worker = await server.connected_worker("a")
    other = await server.create_worker("b")
    before = await server.worker_view(worker.worker_id)
    await server.clock.advance(5)
    resp = await worker.heartbeat(worker_id=other.worker_id)
    assert resp.status == 400
    assert await resp.json() == {"detail": "Worker ID mismatch"}
    after = await server.worker_view(worker.worker_id)
    assert after["last_heartbeat"] == before["last_heartbeat"]
    worker.close()


# --- job status -------------------------------------------------------------------------


async def test_first_status_report_acknowledges_the_dispatch(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = (await server.submit(target="worker"))["job_id"]
    await worker.stream.expect("job_submit")
    assert (await server.job(job_id))["status"] == "dispatched"
    await server.clock.advance(3)
    resp = await worker.report(job_id, "starting")
    assert resp.status == 200
    assert await resp.json() == {"success": True}
    job = await server.job(job_id)
    assert job["status"] == "running"
    assert job["started_at"] == "2023-11-14T22:13:23.000Z"
    assert [e["kind"] for e in job["timeline"]] == ["submitted", "dispatched", "started"]
    assert job["attempt_history"][0]["started_at"] == job["started_at"]
    # Acknowledged: the dispatch acknowledgement timeout (60 s) no longer applies.
    await server.clock.advance(61)
    assert (await server.job(job_id))["status"] == "running"
    worker.close()


async def test_training_is_simpletuners_word_for_running(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = (await server.submit(target="worker"))["job_id"]
    await worker.stream.expect("job_submit")
    resp = await worker.report(job_id, "training", progress={"step": 1})
    assert resp.status == 200
    job = await server.job(job_id)
    assert job["status"] == "running"
    assert job["progress"] == {"step": 1}
    worker.close()


async def test_completed_report_ends_the_job_and_frees_the_worker(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    assert (await worker.report(job_id, "completed")).status == 200
    job = await server.wait_job(job_id, "completed")
    assert job["attempt_history"][0]["outcome"] == "completed"
    await server.wait_worker(worker.worker_id, "idle")
    # The worker takes the next job.
    next_id = (await server.submit(target="worker"))["job_id"]
    assert (await worker.stream.expect("job_submit")).data["job_id"] == next_id
    worker.close()


async def test_failed_report_keeps_the_agents_error(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker, max_retries=0)  # a job error: no retry
    resp = await worker.report(job_id, "failed", error="Training exited with code 1")
    assert resp.status == 200
    job = await server.wait_job(job_id, "failed")
    assert job["error"] == "Training exited with code 1"
    worker.close()


async def test_retried_final_report_gets_the_same_answer(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    assert (await worker.report(job_id, "completed")).status == 200
    await server.wait_job(job_id, "completed")
    resp = await worker.report(job_id, "completed")
    assert resp.status == 200
    worker.close()


async def test_status_for_another_workers_job_is_403(server: Any) -> None:
    owner = await server.connected_worker("owner")
    job_id = await server.running_job(owner)
    stranger = await server.connected_worker("stranger")
    resp = await stranger.report(job_id, "completed")
    assert resp.status == 403
    assert await resp.json() == {"detail": "Worker not assigned to this job"}
    assert (await server.job(job_id))["status"] == "running"
    owner.close()
    stranger.close()


async def test_status_for_an_unknown_job_is_404(server: Any) -> None:
    worker = await server.connected_worker()
    resp = await worker.report("j_doesnotexist", "running")
    assert resp.status == 404
    assert await resp.json() == {"detail": "Job not found: j_doesnotexist"}
    worker.close()


async def test_status_from_a_worker_that_lost_the_job_is_409(server: Any) -> None:
    first = await server.connected_worker("first")
    job_id = await server.running_job(first)
    first.close()
    await first.disconnect()
    second = await server.connected_worker("second")
    await second.take_job()
    resp = await first.report(job_id, "completed")
    assert resp.status == 409
    assert "abandon" in (await resp.json())["detail"]
    assert (await server.job(job_id))["status"] == "running"
    second.close()


# --- logs -------------------------------------------------------------------------------


async def test_log_lines_are_stored_and_readable(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    resp = await worker.send_logs(job_id, ["step 1 loss=0.5", "step 2 loss=0.4"])
    assert resp.status == 200
    assert await resp.json() == {"success": True, "stored": 2, "dropped": 0, "quota_reached": False}
    data = await server.ok("GET", f"/api/queue/{job_id}/logs")
    assert [line["line"] for line in data["lines"]] == ["step 1 loss=0.5", "step 2 loss=0.4"]
    assert data["lines"][0]["stream"] == "stdout"
    assert data["lines"][0]["attempt"] == 1
    later = await server.ok("GET", f"/api/queue/{job_id}/logs?from_seq={data['next_seq']}")
    assert later["lines"] == []
    worker.close()


async def test_logs_for_another_workers_job_are_403_and_unknown_job_404(server: Any) -> None:
    owner = await server.connected_worker("owner")
    job_id = await server.running_job(owner)
    stranger = await server.connected_worker("stranger")
    resp = await stranger.send_logs(job_id, ["not mine"])
    assert resp.status == 403
    assert await resp.json() == {"detail": "Worker not assigned to this job"}
    resp = await stranger.send_logs("j_nope", ["x"])
    assert resp.status == 404
    assert (await server.ok("GET", f"/api/queue/{job_id}/logs"))["lines"] == []
    owner.close()
    stranger.close()


# --- queue check and disconnect -----------------------------------------------------------


async def test_queue_check_says_whether_a_job_for_this_worker_waits(server: Any) -> None:
    worker = await server.create_worker("eph", labels={"gpu_type": "a100"}, worker_type="ephemeral")
    await worker.register("eph")  # no stream open: nothing is dispatched to it
    resp = await worker.queue_check()
    assert resp.status == 200
    assert await resp.json() == {"has_jobs": False}
    await server.submit(target="worker", worker_labels={"gpu_type": "h100"})
    assert await (await worker.queue_check()).json() == {"has_jobs": False}
    await server.submit(target="worker", worker_labels={"gpu_type": "a1*"})
    assert await (await worker.queue_check()).json() == {"has_jobs": True}


async def test_queue_check_for_another_worker_id_is_400(server: Any) -> None:
    worker = await server.create_worker("a")
    await worker.register("a")
    other = WorkerClient(server.client, worker.token, "w_someoneelse")
    resp = await other.queue_check()
    assert resp.status == 400
    assert await resp.json() == {"detail": "Worker ID mismatch"}


async def test_disconnect_marks_offline_and_requeues_the_job(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    resp = await worker.disconnect()
    assert resp.status == 200
    assert await resp.json() == {"success": True}
    await worker.stream.expect_closed()
    view = await server.worker_view(worker.worker_id)
    assert (view["status"], view["connected"], view["current_job_id"]) == ("offline", False, None)
    job = await server.wait_job(job_id, "pending")
    assert job["attempt_history"][0]["outcome"] == "lost"
    assert "disconnected" in job["attempt_history"][0]["reason"]


async def test_disconnect_for_another_worker_id_is_400_and_changes_nothing(server: Any) -> None:
    worker = await server.connected_worker()
    resp = await worker.post("/api/workers/disconnect", {"worker_id": "w_other"})
    assert resp.status == 400
    assert await resp.json() == {"detail": "Worker ID mismatch"}
    assert (await server.worker_view(worker.worker_id))["status"] == "idle"
    worker.close()


# --- ephemeral workers and restarts -------------------------------------------------------


async def test_ephemeral_worker_is_told_to_shut_down_after_its_job(server: Any) -> None:
    worker = await server.create_worker("eph", worker_type="ephemeral")
    await worker.connect("eph", persistent=False)
    job_id = await server.running_job(worker)
    assert (await worker.report(job_id, "completed")).status == 200
    shutdown = await worker.stream.expect("shutdown")
    assert shutdown.data["reason"]
    # SimpleTuner's agent asks before leaving: nothing for it.
    assert await (await worker.queue_check()).json() == {"has_jobs": False}
    worker.close()


async def test_ephemeral_worker_that_asks_for_more_work_gets_it(server: Any) -> None:
    worker = await server.create_worker("eph", labels={"pool": "spot"}, worker_type="ephemeral")
    await worker.connect("eph", persistent=False)
    job_id = await server.running_job(worker)
    waiting = (await server.submit(target="worker", worker_labels={"pool": "spot"}))["job_id"]
    assert (await worker.report(job_id, "completed")).status == 200
    await worker.stream.expect_nothing()  # not pushed to an agent on its way out, unasked
    assert await (await worker.queue_check()).json() == {"has_jobs": True}
    assert (await worker.stream.expect("job_submit")).data["job_id"] == waiting
    worker.close()


async def test_resume_after_an_orchestrator_restart(make_server: Any) -> None:
    first = await make_server()
    worker = await first.connected_worker()
    job_id = await first.running_job(worker, config_name="tiny")
    worker.close()
    await first.client.close()

    second = await make_server()
    worker.client = second.client
    data = await worker.register(current_job_id=job_id)
    assert data["resume_job"] == {"job_id": job_id, "config_name": "tiny", "status": "running"}
    stream = await worker.open_stream(last_event_id=1)
    await stream.expect_nothing()
    assert (await worker.report(job_id, "completed")).status == 200
    await second.wait_job(job_id, "completed")
    worker.close()


async def test_unacknowledged_dispatch_is_sent_again_after_a_restart(make_server: Any) -> None:
    first = await make_server()
    worker = await first.connected_worker()
    job_id = (await first.submit(target="worker"))["job_id"]
    sent = await worker.stream.expect("job_submit")
    worker.close()
    await first.client.close()

    second = await make_server()
    worker.client = second.client
    await worker.register()
    stream = await worker.open_stream(last_event_id=sent.id)
    again = await stream.expect("job_submit")
    assert again.data["job_id"] == job_id
    assert int(again.id) > int(sent.id)  # ids keep increasing across the restart
    assert (await worker.report(job_id, "starting")).status == 200
    await second.wait_job(job_id, "running")
    worker.close()
