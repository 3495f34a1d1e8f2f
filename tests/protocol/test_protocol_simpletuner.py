"""The protocol models hold to what SimpleTuner's own agent sends and reads
(shared/PROTOCOL.md): its bodies parse, unknown fields included, and what the
orchestrator builds from the models carries every field that agent reads, in the type it
reads it in. The fixtures are that agent's payloads, verbatim."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tunefleet.agent.gpu import GpuDevice, GpuInventory
from tunefleet.agent.job_events import LogLine as ExecutorLogLine
from tunefleet.agent.job_submit import job_spec
from tunefleet.agent.outbox import Outbox
from tunefleet.protocol.endpoints import (
    DisconnectRequest,
    GpuInfo,
    HeartbeatRequest,
    JobLogsRequest,
    JobStatusRequest,
    LogLine,
    QueueCheckResponse,
    RegisterRequest,
    RegisterResponse,
    StandbyRefusal,
    log_line,
)
from tunefleet.protocol.events import (
    DrainEvent,
    JobCancelEvent,
    JobRequirements,
    JobSubmitEvent,
    PingEvent,
    ShutdownEvent,
    read_event,
)

# --- what SimpleTuner's agent sends ----------------------------------------------------

ST_REGISTER = {
    "name": "gpu-worker-1",
    "gpu_info": {
        "name": "NVIDIA A100-SXM4-80GB",
        "vram_gb": 80,
        "count": 2,
        "accelerator": "cuda",
        "driver": "12.4",
    },
    "persistent": True,
    "provider": None,
    "labels": {"gpu_type": "a100"},
    "current_job_id": None,
}
# What it reports on a machine where it finds no GPU.
ST_NO_GPU = {"name": "Unknown", "vram_gb": None, "count": 0, "accelerator": None}
ST_HEARTBEAT = {"worker_id": "w_abc123", "status": "busy", "current_job_id": "j_1"}
ST_STATUS_TRAINING = {"status": "training", "progress": {"step": 10, "loss": 0.5}, "error": None}
ST_STATUS_FAILED = {"status": "failed", "progress": None, "error": "CUDA out of memory"}
ST_DISCONNECT = {"worker_id": "w_abc123"}


def test_its_registration_parses_with_the_gpus_in_the_one_stored_spelling() -> None:
    body = RegisterRequest.model_validate(ST_REGISTER)
    assert (body.name, body.persistent, body.labels) == ("gpu-worker-1", True, {"gpu_type": "a100"})
    assert body.gpu() == GpuInfo(
        name="NVIDIA A100-SXM4-80GB", vram_gb=80, count=2, accelerator="cuda", driver="12.4"
    )
    bare = RegisterRequest.model_validate({**ST_REGISTER, "gpu_info": ST_NO_GPU})
    assert bare.gpu().count == 0


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (RegisterRequest, ST_REGISTER),
        (HeartbeatRequest, ST_HEARTBEAT),
        (JobStatusRequest, ST_STATUS_TRAINING),
        (JobStatusRequest, ST_STATUS_FAILED),
        (DisconnectRequest, ST_DISCONNECT),
    ],
)
def test_its_bodies_parse_and_fields_it_adds_later_are_ignored(model: Any, body: Any) -> None:
    plain = model.model_validate(body)
    extended = model.model_validate({**body, "a_field_from_a_newer_agent": {"x": [1]}})
    assert extended == plain
    for key, value in body.items():
        if key != "gpu_info":
            assert getattr(plain, key) == value


# --- what SimpleTuner's agent reads ----------------------------------------------------


def wire(model: Any) -> dict[str, Any]:
    """The event's data as it goes on the stream (the route writes it with json.dumps)."""
    return json.loads(json.dumps(model.model_dump()))


def test_a_job_submit_carries_every_field_its_agent_reads_in_its_type() -> None:
    # As the orchestrator builds it for a job with no artifact store: no token.
    submit = wire(JobSubmitEvent(job_id="j_1", config={"model_type": "lora"}, attempt=1))
    assert submit["type"] == "job_submit"
    assert submit["job_id"] == "j_1"
    assert submit["config"] == {"model_type": "lora"}
    assert "dataloader" in submit and "provider" in submit and "hf_token" in submit
    # Read unconditionally; a null token makes that agent fail to start the trainer.
    assert submit["upload_endpoint"] == ""
    assert submit["upload_token"] == ""
    with_store = wire(
        JobSubmitEvent(
            job_id="j_1",
            config={},
            upload_endpoint="/api/artifacts",
            upload_token="ut_x",
            resume_checkpoint="checkpoint-200",
        )
    )
    # A path: that agent puts its orchestrator URL in front of it.
    assert with_store["upload_endpoint"] == "/api/artifacts"
    assert with_store["upload_token"] == "ut_x"


def test_the_job_submit_schema_never_lets_the_token_be_null() -> None:
    schema = JobSubmitEvent.model_json_schema(mode="serialization")
    assert schema["properties"]["upload_token"]["type"] == "string"
    assert schema["properties"]["upload_endpoint"]["type"] == "string"
    assert "job_id" in schema["required"]


def test_the_other_events_as_its_agent_reads_them() -> None:
    # tunefleet's additions (preempt, grace_seconds) ride along; that agent reads only
    # the type and the job id, and stops its trainer whatever they say.
    assert wire(JobCancelEvent(job_id="j_1", reason="cancelled by admin")) == {
        "type": "job_cancel",
        "job_id": "j_1",
        "reason": "cancelled by admin",
        "preempt": False,
        "grace_seconds": None,
    }
    preempting = JobCancelEvent(job_id="j_1", reason="reclaim", preempt=True, grace_seconds=120)
    assert wire(preempting) == {
        "type": "job_cancel",
        "job_id": "j_1",
        "reason": "reclaim",
        "preempt": True,
        "grace_seconds": 120,
    }
    assert wire(DrainEvent()) == {"type": "drain"}
    # The reason at the top level, where that agent reads it.
    assert wire(ShutdownEvent(reason="worker drained")) == {
        "type": "shutdown",
        "reason": "worker drained",
    }
    assert wire(PingEvent()) == {"type": "ping"}


def test_the_register_answer_keeps_the_protocols_four_fields() -> None:
    answer = wire(
        RegisterResponse(worker_id="w_abc123", sse_url="/api/workers/stream?worker_id=w_abc123")
    )
    assert {k: answer[k] for k in ("worker_id", "sse_url", "resume_job", "abandon_job")} == {
        "worker_id": "w_abc123",
        "sse_url": "/api/workers/stream?worker_id=w_abc123",
        "resume_job": None,
        "abandon_job": None,
    }


# --- tunefleet's agent reading SimpleTuner's server --------------------------------------

ST_SERVER_JOB_SUBMIT = {
    "type": "job_submit",
    "job_id": "abc123",
    "config": {"model_type": "lora", "output_dir": "/out"},
    "dataloader": [{"id": "dataset", "type": "local"}],
    "provider": None,
    "upload_endpoint": "https://orchestrator.example.com/api/cloud/jobs/abc123/upload",
    "upload_token": "",
    "hf_token": None,
}
# SimpleTuner's server nests the shutdown reason under "data".
ST_SERVER_SHUTDOWN = {"type": "shutdown", "data": {"reason": "worker removed"}}


def test_its_servers_job_submit_runs_as_the_first_attempt_without_an_upload() -> None:
    event = read_event(JobSubmitEvent, ST_SERVER_JOB_SUBMIT)
    assert event is not None
    spec = job_spec(event, "https://orchestrator.example.com")
    assert (spec.job_id, spec.attempt, spec.command) == ("abc123", 1, None)
    assert spec.config == ST_SERVER_JOB_SUBMIT["config"]
    assert spec.dataloader == ST_SERVER_JOB_SUBMIT["dataloader"]
    assert spec.artifacts is None  # an empty token: nothing to store with
    assert spec.env == {}


def test_its_servers_nested_shutdown_reason_is_read() -> None:
    event = read_event(ShutdownEvent, ST_SERVER_SHUTDOWN)
    assert event is not None and event.reason == "worker removed"
    assert read_event(ShutdownEvent, {"type": "shutdown"}) == ShutdownEvent(
        reason="no reason given"
    )


@pytest.mark.parametrize(
    ("field", "unreadable"),
    [
        ("upload_token", None),
        ("config", "not an object"),
        ("attempt", 0),
        ("attempt", True),
        ("command", []),
        ("requirements", "any"),
        ("hf_token", 5),
    ],
)
def test_a_field_the_agent_cannot_read_counts_as_absent(field: str, unreadable: object) -> None:
    event = read_event(JobSubmitEvent, {**ST_SERVER_JOB_SUBMIT, field: unreadable})
    bare = read_event(JobSubmitEvent, {k: v for k, v in ST_SERVER_JOB_SUBMIT.items() if k != field})
    assert event is not None and event == bare


def test_a_job_cancel_from_an_older_or_other_server_reads_as_a_plain_cancel() -> None:
    plain = read_event(JobCancelEvent, {"type": "job_cancel", "job_id": "j_1"})
    assert plain is not None and (plain.preempt, plain.grace_seconds) == (False, None)
    odd = {"job_id": "j_1", "preempt": "soon", "grace_seconds": -5}
    read = read_event(JobCancelEvent, odd)
    assert read is not None and (read.preempt, read.grace_seconds) == (False, None)


def test_an_event_without_its_job_is_ignored() -> None:
    assert read_event(JobSubmitEvent, {"type": "job_submit", "config": {}}) is None
    assert read_event(JobSubmitEvent, {"type": "job_submit", "job_id": ""}) is None
    assert read_event(JobCancelEvent, {"type": "job_cancel"}) is None


def test_env_values_reach_the_trainer_as_text_and_null_ones_not_at_all() -> None:
    event = read_event(
        JobSubmitEvent,
        {**ST_SERVER_JOB_SUBMIT, "env": {"EPOCHS": 3, "GONE": None}, "hf_token": "hf_x"},
    )
    assert event is not None
    assert job_spec(event, "").env == {"EPOCHS": "3", "HF_TOKEN": "hf_x"}


def test_requirements_round_trip() -> None:
    requirements = JobRequirements(target="local", gpu_count=2)
    event = JobSubmitEvent(job_id="j", config={}, requirements=requirements)
    again = read_event(JobSubmitEvent, wire(event))
    assert again == event


# --- what tunefleet's agent sends, built from the same models ---------------------------


def test_a_log_line_is_built_as_the_model_says() -> None:
    line = log_line(7, "stderr", "loss=0.5", 1700000000.5)
    assert list(line) == list(LogLine.model_fields)
    assert LogLine.model_validate(line).model_dump() == line


def test_the_outbox_reports_parse_with_the_orchestrators_models() -> None:
    outbox = Outbox()
    outbox.add_status("j_1", "starting", attempt=2)
    outbox.add_status(
        "j_1",
        "completed",
        attempt=2,
        progress={"step": 5},
        outputs={"stored": True, "keys": 2, "bytes": 10},
        resumed_from="checkpoint-4",
    )
    outbox.add_logs("j_2", 1, [ExecutorLogLine(0, "stdout", "hello", 1.5)])
    first, final, logs = outbox.pending()
    # Exactly the fields set, the protocol's three always (null included).
    assert first.body == {"status": "starting", "progress": None, "error": None, "attempt": 2}
    assert JobStatusRequest.model_validate(final.body).model_dump(exclude_unset=True) == final.body
    assert final.body["outputs"] == {"stored": True, "keys": 2, "bytes": 10}
    assert logs.body == {"attempt": 1, "lines": [log_line(0, "stdout", "hello", 1.5)]}
    JobLogsRequest.model_validate(logs.body)


def test_the_gpu_report_parses_and_the_device_list_is_not_kept() -> None:
    inventory = GpuInventory(devices=(GpuDevice(0, "NVIDIA A100", 80.0, "GPU-a"),))
    body = RegisterRequest.model_validate({"name": "w", **inventory.register_fields()})
    assert body.gpu_info is not None and body.gpu_info.devices is not None
    assert body.gpu_info.devices[0].uuid == "GPU-a"
    assert "devices" not in body.gpu().model_dump()
    # An odd device list never costs the registration.
    odd = {"name": "w", "gpu_info": {"count": 1, "devices": "?"}}
    assert RegisterRequest.model_validate(odd).gpu().count == 1


def test_the_agent_reads_simpletuners_register_answer() -> None:
    answer = RegisterResponse.read(
        {"worker_id": "w_abc123", "sse_url": "", "resume_job": None, "abandon_job": ""}
    )
    assert answer.sse_url == "/api/workers/stream?worker_id=w_abc123"
    assert (answer.abandon_job, answer.name, answer.worker_type) == (None, None, None)
    odd = RegisterResponse.read({"worker_id": "w_1", "worker_type": "spot", "warnings": 3})
    assert (odd.worker_type, odd.warnings) == (None, [])


def test_a_standbys_refusal_names_the_active_orchestrator() -> None:
    refusal = StandbyRefusal(detail="this orchestrator is a standby", active_url="http://a:1")
    assert wire(refusal) == {"detail": "this orchestrator is a standby", "active_url": "http://a:1"}
    assert StandbyRefusal.model_validate({"detail": "proxy says no"}).active_url is None


def test_the_queue_answer_reads_as_no_when_it_cannot_be_read() -> None:
    assert QueueCheckResponse.model_validate({"has_jobs": True}).has_jobs is True
    assert QueueCheckResponse.model_validate({"has_jobs": "maybe"}).has_jobs is False
    assert QueueCheckResponse.model_validate({}).has_jobs is False
