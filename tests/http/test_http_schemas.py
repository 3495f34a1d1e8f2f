"""The wire schemas accept what PROTOCOL.md, the seed document and SimpleTuner's agent send,
verbatim, and refuse bad values with one-line details."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from tunefleet.fsm.job import JobState
from tunefleet.fsm.worker import WorkerState
from tunefleet.http.body import parse_json_bytes, parse_query_mapping
from tunefleet.http.errors import ApiError
from tunefleet.http.schemas import (
    JOB_STATUSES,
    REQUEST_MODELS,
    WORKER_STATUSES,
    CancelJobRequest,
    CreateApiTokenRequest,
    CreateWorkerRequest,
    CreateWorkerResponse,
    DisconnectRequest,
    GpuInfo,
    HeartbeatRequest,
    JobDetail,
    JobLogsRequest,
    JobStatusRequest,
    JobSubmitEvent,
    QueueStatsResponse,
    RegisterRequest,
    RegisterResponse,
    StrictRequestModel,
    SubmitJobRequest,
    UpdateWorkerLabelsRequest,
    WorkerIdQuery,
    WorkerListResponse,
    WorkerSummary,
    hide_env_values,
)


def parse(model: type[BaseModel], text: str | bytes) -> Any:
    raw = text.encode() if isinstance(text, str) else text
    return parse_json_bytes(raw, model)


def refused(model: type[BaseModel], body: Any) -> str:
    with pytest.raises(ApiError) as caught:
        parse(model, json.dumps(body))
    assert caught.value.status == 400
    assert "\n" not in caught.value.detail
    return caught.value.detail


# --- PROTOCOL.md examples, verbatim ----------------------------------------------------

PROTOCOL_REGISTER = """{"name": "gpu-worker-1",
 "gpu_info": {"name": "NVIDIA A100-SXM4-80GB", "vram_gb": 80, "count": 2, "accelerator": "cuda", "driver": "12.4"},
 "persistent": true, "provider": null, "labels": {"gpu_type": "a100"},
 "current_job_id": null}"""  # noqa: E501

PROTOCOL_REGISTER_RESPONSE = """{"worker_id": "w_abc123", "sse_url": "/api/workers/stream?worker_id=w_abc123",
 "resume_job": null, "abandon_job": null}"""  # noqa: E501


def test_protocol_register_request() -> None:
    body = parse(RegisterRequest, PROTOCOL_REGISTER)
    assert body.name == "gpu-worker-1"
    assert body.persistent is True
    assert body.labels == {"gpu_type": "a100"}
    assert body.current_job_id is None
    assert body.gpu() == GpuInfo(
        name="NVIDIA A100-SXM4-80GB", vram_gb=80, count=2, accelerator="cuda", driver="12.4"
    )


def test_protocol_register_response() -> None:
    response = RegisterResponse.model_validate_json(PROTOCOL_REGISTER_RESPONSE)
    dumped = response.model_dump()
    # tunefleet's additions come on top of the protocol's fields, which stay as they are.
    assert (dumped.pop("name"), dumped.pop("worker_type"), dumped.pop("warnings")) == (
        None,
        None,
        [],
    )
    assert dumped == json.loads(PROTOCOL_REGISTER_RESPONSE)


def test_register_response_with_a_job_to_resume() -> None:
    response = RegisterResponse(
        worker_id="w_1",
        sse_url="/api/workers/stream?worker_id=w_1",
        resume_job={"job_id": "j_1", "config_name": "my-config", "status": "running"},  # type: ignore[arg-type]
    )
    assert response.model_dump()["resume_job"] == {
        "job_id": "j_1",
        "config_name": "my-config",
        "status": "running",
    }


def test_protocol_job_status_bodies() -> None:
    for status in ("starting", "running", "training", "completed", "failed", "cancelled"):
        body = parse(JobStatusRequest, json.dumps({"status": status, "progress": None}))
        assert body.status == status
    body = parse(JobStatusRequest, '{"status": "running", "progress": {"step": 10}, "error": null}')
    assert body.progress == {"step": 10}


def test_protocol_heartbeat_with_every_field() -> None:
    body = parse(
        HeartbeatRequest,
        '{"worker_id": "w_abc123", "status": "busy", "current_job_id": "j_1", '
        '"job_progress": {"step": 3}, "gpu_utilization": [97.0, 95.5], "vram_used_gb": [70, 71]}',
    )
    assert body.gpu_utilization == [97.0, 95.5]
    assert body.vram_used_gb == [70.0, 71.0]


def test_protocol_submit_example() -> None:
    body = parse(
        SubmitJobRequest,
        '{"config_name": "my-config", "target": "worker", "worker_labels": {"gpu_type": "a100*"}}',
    )
    assert (body.config_name, body.target, body.worker_labels) == (
        "my-config",
        "worker",
        {"gpu_type": "a100*"},
    )


# --- the seed document's examples ------------------------------------------------------


def test_seed_flat_gpu_spelling_is_normalised() -> None:
    seed = '{"gpu_count": 2, "gpu_name": "NVIDIA A100-SXM4-80GB", "gpu_vram_gb": 80, "accelerator_type": "cuda"}'  # noqa: E501
    body = parse(RegisterRequest, seed[:-1] + ', "name": "gpu-worker-1"}')
    assert body.gpu() == GpuInfo(
        name="NVIDIA A100-SXM4-80GB", vram_gb=80, count=2, accelerator="cuda"
    )


def test_nested_gpu_values_win_and_flat_ones_fill_gaps() -> None:
    body = RegisterRequest.model_validate(
        {
            "name": "w",
            "gpu_info": {"name": "H100", "count": 8},
            "gpu_count": 2,
            "gpu_name": "A100",
            "gpu_vram_gb": 80,
        }
    )
    assert body.gpu() == GpuInfo(name="H100", count=8, vram_gb=80)


def test_no_gpu_report_is_zero_gpus() -> None:
    assert RegisterRequest(name="w").gpu() == GpuInfo(count=0)


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "gpu-worker-1", "worker_type": "persistent", '
        '"labels": {"location": "datacenter-a", "gpu_type": "a100"}}',
        '{"name": "worker-1", '
        '"labels": {"location": "us-west", "gpu_type": "a100", "team": "nlp"}}',
    ],
)
def test_seed_create_worker_bodies(body: str) -> None:
    parsed = parse(CreateWorkerRequest, body)
    assert parsed.worker_type == "persistent"
    assert parsed.labels["gpu_type"] == "a100"


def test_seed_create_worker_response_shape() -> None:
    response = CreateWorkerResponse(
        worker_id="w_abc123",
        token="wt_xxxxxxxxxxxx",
        name="gpu-worker-1",
        worker_type="persistent",
        labels={},
        connection_command="tunefleet worker --orchestrator-url https://o:8001 ...",
        environment={"SIMPLETUNER_WORKER_TOKEN": "wt_xxxxxxxxxxxx"},
    )
    dumped = response.model_dump()
    assert {"worker_id", "token", "name", "connection_command"} <= set(dumped)


@pytest.mark.parametrize(
    ("body", "target", "labels"),
    [
        ('{"config_name": "my-training-config", "target": "worker"}', "worker", {}),
        (
            '{"config_name": "my-config", "target": "worker", "worker_labels": {"gpu_type": "a100*"}}',  # noqa: E501
            "worker",
            {"gpu_type": "a100*"},
        ),
        ('{"config_name": "my-config", "worker_labels": {"team": "nlp"}}', "auto", {"team": "nlp"}),
    ],
)
def test_seed_submit_bodies(body: str, target: str, labels: dict[str, str]) -> None:
    parsed = parse(SubmitJobRequest, body)
    assert (parsed.target, parsed.worker_labels) == (target, labels)
    assert parsed.priority == 0
    assert parsed.max_retries is None
    assert parsed.gpu_count is None


def test_seed_worker_list_item_as_tunefleet_sends_it() -> None:
    # The seed's example plus the fields PROTOCOL.md adds (worker_id, connected, ...).
    item = {
        "id": "w_abc123",
        "worker_id": "w_abc123",
        "name": "gpu-worker-1",
        "status": "idle",
        "worker_type": "persistent",
        "gpu_count": 2,
        "gpu_name": "A100",
        "labels": {"location": "datacenter-a"},
        "last_heartbeat": "2024-01-15T10:30:00Z",
        "connected": True,
        "uptime_seconds": 12.5,
    }
    listing = WorkerListResponse.model_validate({"workers": [item], "total": 1})
    assert listing.workers[0].last_heartbeat == "2024-01-15T10:30:00Z"
    protocol_fields = {
        "worker_id", "id", "name", "status", "worker_type", "gpu_count", "gpu_name",
        "gpu_vram_gb", "gpu_info", "labels", "current_job_id", "last_heartbeat",
        "connected_at", "created_at", "connected", "uptime_seconds",
    }  # fmt: skip
    extra_fields = {"drain_requested", "agent_labels", "hostname", "client_address", "last_seen"}
    assert protocol_fields | extra_fields <= set(WorkerSummary.model_fields)


# --- SimpleTuner's agent, as its code sends ---------------------------------------------


@pytest.mark.parametrize(
    ("gpu_info", "expected"),
    [
        (
            {"name": "NVIDIA A100-SXM4-80GB", "vram_gb": 85.1, "count": 2, "driver": "12.1",
             "accelerator": "cuda"},
            GpuInfo(name="NVIDIA A100-SXM4-80GB", vram_gb=85.1, count=2, driver="12.1",
                    accelerator="cuda"),
        ),
        (
            {"name": "NVIDIA A100-SXM4-80GB", "vram_gb": 85.1, "count": 2, "driver": None,
             "accelerator": "cuda"},
            GpuInfo(name="NVIDIA A100-SXM4-80GB", vram_gb=85.1, count=2, accelerator="cuda"),
        ),
        (
            {"name": "Apple Silicon", "vram_gb": None, "count": 1, "accelerator": "mps"},
            GpuInfo(name="Apple Silicon", count=1, accelerator="mps"),
        ),
        (
            {"name": "Unknown", "vram_gb": None, "count": 0, "accelerator": None},
            GpuInfo(name="Unknown", count=0),
        ),
    ],
)  # fmt: skip
def test_simpletuner_agent_register(gpu_info: dict[str, Any], expected: GpuInfo) -> None:
    for current_job_id in (None, "j_42"):
        body = {
            "name": "gpu-box.local",
            "gpu_info": gpu_info,
            "persistent": False,
            "current_job_id": current_job_id,
        }
        parsed = parse(RegisterRequest, json.dumps(body))
        assert parsed.gpu() == expected
        assert parsed.current_job_id == current_job_id


def test_simpletuner_agent_heartbeat() -> None:
    for status, job in (("idle", None), ("busy", "j_42")):
        body = {"worker_id": "w_abc123", "status": status, "current_job_id": job}
        parsed = parse(HeartbeatRequest, json.dumps(body))
        assert (parsed.worker_id, parsed.status, parsed.current_job_id) == ("w_abc123", status, job)
        assert parsed.job_progress is None


@pytest.mark.parametrize(
    "body",
    [
        {"status": "starting", "error": None},
        {"status": "training", "error": None},
        {"status": "completed", "error": None},
        {"status": "failed", "error": "Training exited with code 1"},
        {"status": "cancelled", "error": None},
    ],
)
def test_simpletuner_agent_status_reports(body: dict[str, Any]) -> None:
    parsed = parse(JobStatusRequest, json.dumps(body))
    assert (parsed.status, parsed.error, parsed.progress) == (body["status"], body["error"], None)


def test_simpletuner_agent_disconnect_and_queue_check() -> None:
    assert parse(DisconnectRequest, '{"worker_id": "w_abc123"}').worker_id == "w_abc123"
    assert parse_query_mapping({"worker_id": "w_abc123"}, WorkerIdQuery).worker_id == "w_abc123"


def test_job_submit_event_always_has_upload_fields_as_strings() -> None:
    event = JobSubmitEvent(job_id="j_1", config={"model_type": "lora"}).model_dump()
    assert event["type"] == "job_submit"
    assert event["upload_endpoint"] == ""
    assert event["upload_token"] == ""


def test_unknown_fields_from_agents_are_ignored() -> None:
    body = '{"worker_id": "w_1", "status": "idle", "timestamp": "2024-01-01T00:00:00Z", "x": [1]}'
    assert parse(HeartbeatRequest, body).status == "idle"
    # What SimpleTuner's agent (and a newer tunefleet agent) may add on registering.
    register = (
        '{"name": "w", "persistent": true, "agent": "simpletuner", "version": "3.0",'
        ' "gpu_info": {"name": "A100", "count": 1, "memory_total": 80, "uuid": "GPU-1"}}'
    )
    assert parse(RegisterRequest, register).gpu().count == 1


@pytest.mark.parametrize(
    ("model", "body", "detail"),
    [
        (
            SubmitJobRequest,
            {"config_name": "a", "worker_label": {"team": "nlp"}},
            "unknown field 'worker_label' (did you mean 'worker_labels'?)",
        ),
        (
            SubmitJobRequest,
            {"config_name": "a", "gpus": 2},
            "unknown field 'gpus'; the fields are config_name, config, dataloader, name, "
            "target, worker_labels, gpu_count, min_vram_gb, gpu_name, priority, max_retries, "
            "timeout_minutes, command, env, team",
        ),
        (CancelJobRequest, {"reasn": "x"}, "unknown field 'reasn' (did you mean 'reason'?)"),
        (
            CreateApiTokenRequest,
            {"name": "ci", "permission": ["queue.submit"]},
            "unknown field 'permission' (did you mean 'permissions'?)",
        ),
        (
            UpdateWorkerLabelsRequest,
            {"label": {}},
            "unknown field 'label' (did you mean 'labels'?) (and 1 more problem)",
        ),
    ],
)
def test_unknown_fields_in_bodies_people_write_are_refused_naming_the_closest(
    model: type[BaseModel], body: dict[str, object], detail: str
) -> None:
    with pytest.raises(ApiError) as caught:
        parse_json_bytes(json.dumps(body).encode(), model)
    assert (caught.value.status, caught.value.detail) == (400, detail)


# --- refusals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "body", "detail"),
    [
        (RegisterRequest, {}, "name: required"),
        (RegisterRequest, {"name": ""}, "name: must not be empty"),
        (RegisterRequest, {"name": "a\nb"},
         "name: must not contain control characters (newlines, tabs, NUL)"),
        (RegisterRequest, {"name": "w", "gpu_info": {"count": -1}}, "gpu_info.count: must be ≥ 0"),
        (RegisterRequest, {"name": "w", "gpu_count": 5000}, "gpu_count: must be ≤ 1024"),
        (RegisterRequest, {"name": "w", "gpu_info": "A100"}, "gpu_info: must be a JSON object"),
        (RegisterRequest, {"name": "w", "current_job_id": "j 1"},
         "current_job_id: must be an id of letters, digits, '.', '_', ':' and '-'"),
        (RegisterRequest, {"name": "w", "labels": {"": "x"}},
         'labels[""] (key): must not be empty'),
        (HeartbeatRequest, {"gpu_utilization": [-1]}, "gpu_utilization[0]: must be ≥ 0"),
        (HeartbeatRequest, {"job_progress": {"blob": "x" * 70000}},
         "job_progress: over 64 KiB as JSON; send a smaller object"),
        (JobStatusRequest, {}, "status: required"),
        (JobStatusRequest, {"status": "done"},
         "status: must be 'starting', 'running', 'training', 'completed', 'failed' or 'cancelled'"),
        (JobStatusRequest, {"status": "running", "progress": [1]},
         "progress: must be a JSON object"),
        (JobLogsRequest, {}, "lines: required"),
        (JobLogsRequest, {"lines": [{"seq": 0, "stream": "stdout", "line": "x", "at": 1}] * 1001},
         "lines: must have at most 1000 items"),
        (JobLogsRequest, {"lines": [{"seq": -1, "stream": "stdout", "line": "x", "at": 1}]},
         "lines[0].seq: must be ≥ 0"),
        (CreateWorkerRequest, {"name": "bad name"},
         "name: use only letters, digits, '.', '_' and '-'"),
        (CreateWorkerRequest, {"name": "x" * 65}, "name: must be at most 64 characters"),
        (CreateWorkerRequest, {"name": "w", "labels": {"k": "v\n"}},
         'labels: label "k" must be at most 256 characters without control characters'),
        (CreateWorkerRequest, {"name": "w", "labels": {f"k{i}": "v" for i in range(65)}},
         "labels: at most 64 labels"),
        (CreateWorkerRequest, {"name": "w", "token": "wt_mine"},
         "unknown field 'token'; the fields are name, worker_type, labels"),
        (CreateApiTokenRequest, {"name": "ci", "permissions": ["queue.submit"] * 17},
         "permissions: must have at most 16 items"),
        (CreateApiTokenRequest, {"name": "ci", "permissions": ["root"]},
         "permissions[0]: must be 'admin.workers', 'queue.submit', 'queue.admin', 'audit.read', "
         "'queue.command', 'queue.local', 'admin.users', 'queue.approve', 'usage.read' or "
         "'admin.webhooks'"),
        (SubmitJobRequest, {}, "config_name: required; send config_name (a named configuration) "
                               "or config (an inline object)"),
        (SubmitJobRequest, {"config_name": "a", "config": {}},
         "send config_name or config, not both"),
        (SubmitJobRequest, {"config_name": "../secrets"},
         "config_name: use letters, digits, '.', '_', '-' and spaces, with '/' between folder "
         "names; no '..', no leading '/' or '.'"),
        (SubmitJobRequest, {"config_name": "/etc/passwd"}, None),
        (SubmitJobRequest, {"config_name": "a//b"}, None),
        (SubmitJobRequest, {"config": {"x": 1}, "target": "cloud"},
         "target: must be 'worker', 'local' or 'auto'"),
        (SubmitJobRequest, {"config": {"x": 1}, "gpu_count": -1}, "gpu_count: must be ≥ 0"),
        (SubmitJobRequest, {"config": {"x": 1}, "max_retries": 21}, "max_retries: must be ≤ 20"),
        (SubmitJobRequest, {"config": {"x": 1}, "priority": -101}, "priority: must be ≥ -100"),
        (SubmitJobRequest, {"config": {"x": 1}, "min_vram_gb": -1}, "min_vram_gb: must be ≥ 0"),
        (SubmitJobRequest, {"config": {"x": 1}, "command": "python 'open"},
         "command: unbalanced quotes; send a list of strings"),
        (SubmitJobRequest, {"config": {"x": 1}, "command": [1]}, "command[0]: must be a string"),
        (SubmitJobRequest, {"config": {"x": 1}, "env": {"A-B": "1"}},
         "env: 'A-B' is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"),
        (SubmitJobRequest, {"config": {"k": "a\u0000b"}},
         "config: must not contain NUL characters in its strings"),
        (SubmitJobRequest, {"config": {"x": 1}, "dataloader": "s3://x"},
         "dataloader: must be a JSON object or list"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_with_one_line(
    model: type[BaseModel], body: dict[str, Any], detail: str | None
) -> None:
    got = refused(model, body)
    if detail is not None:
        assert got == detail


def test_every_request_string_is_bounded() -> None:
    """Walk each request model's JSON schema: every string has a maxLength or an enum."""

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "string" and "enum" not in node and "const" not in node:
                assert "maxLength" in node, f"unbounded string at {where}"
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}/{i}")

    for model in REQUEST_MODELS:
        walk(model.model_json_schema(), model.__name__)


def test_strict_models_are_the_bodies_people_write() -> None:
    """Admin and queue bodies refuse unknown fields; the agents' and queries ignore them."""
    strict = {m.__name__ for m in REQUEST_MODELS if issubclass(m, StrictRequestModel)}
    assert strict == {
        "CreateWorkerRequest",
        "CreateApiTokenRequest",
        "UpdateWorkerLabelsRequest",
        "SubmitJobRequest",
        "CancelJobRequest",
    }


# --- normalising -----------------------------------------------------------------------


def test_long_error_and_log_lines_are_cut_not_refused() -> None:
    status = JobStatusRequest.model_validate({"status": "failed", "error": "E" * 20_000})
    assert status.error is not None
    assert len(status.error) == 8192
    assert status.error.endswith("chars cut]")
    line = {"seq": 1, "stream": "stderr", "line": "x" * 9000 + "\u0000", "at": 1.0}
    logs = JobLogsRequest.model_validate({"attempt": 1, "lines": [line]})
    assert len(logs.lines[0].line) == 8192
    kept = JobLogsRequest.model_validate({"lines": [{**line, "line": "ok\u0000"}]})
    assert kept.lines[0].line == "ok\ufffd"


def test_numbers_where_text_is_meant() -> None:
    body = RegisterRequest.model_validate(
        {"name": "w", "gpu_info": {"driver": 12.4, "count": None}, "labels": {"gpus": 2, "a": True}}
    )
    assert body.gpu() == GpuInfo(driver="12.4", count=0)
    assert body.labels == {"gpus": "2", "a": "true"}
    one = HeartbeatRequest.model_validate({"gpu_utilization": 55, "vram_used_gb": 10.5})
    assert (one.gpu_utilization, one.vram_used_gb) == ([55.0], [10.5])


def test_command_string_is_split_like_a_shell() -> None:
    body = SubmitJobRequest.model_validate(
        {"config_name": "c", "command": "python -m train --note 'a b'", "env": {"SEED": 7}}
    )
    assert body.command == ["python", "-m", "train", "--note", "a b"]
    assert body.env == {"SEED": "7"}


def test_config_names_with_folders_are_allowed() -> None:
    for name in ("my-config", "examples/flux.peft-lora", "team a/run_1"):
        assert SubmitJobRequest.model_validate({"config_name": name}).config_name == name


def test_duplicate_permissions_collapse() -> None:
    body = CreateApiTokenRequest.model_validate(
        {"name": "ci", "permissions": ["queue.submit", "audit.read", "queue.submit"]}
    )
    assert body.permissions == ["queue.submit", "audit.read"]


def test_env_values_are_hidden_in_job_detail() -> None:
    assert hide_env_values({"HF_TOKEN": "hf_secret", "SEED": "1"}) == {
        "HF_TOKEN": "<hidden>",
        "SEED": "<hidden>",
    }
    assert "attempt_history" in JobDetail.model_fields
    assert "timeline" in JobDetail.model_fields


def test_statuses_match_the_state_machines() -> None:
    assert set(JOB_STATUSES) == {s.value for s in JobState}
    assert set(WORKER_STATUSES) == {s.value for s in WorkerState}


def test_stats_shape() -> None:
    stats = QueueStatsResponse(
        queue_depth=1, running=2, dispatched=0, completed=5, failed=1, cancelled=0,
        workers={"total": 3, "idle": 1, "busy": 2},  # type: ignore[arg-type]
    )  # fmt: skip
    assert stats.model_dump()["workers"] == {
        "total": 3, "idle": 1, "busy": 2, "draining": 0, "offline": 0, "connecting": 0,
    }  # fmt: skip
