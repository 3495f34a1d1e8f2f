"""The worker endpoints' bodies and answers (agent → orchestrator, ``X-Worker-Token``),
as shared/PROTOCOL.md records them.

The orchestrator parses what agents send with these, tunefleet's agent builds what it
sends from them, and the OpenAPI document is generated from them. They must accept
exactly what SimpleTuner's own agent sends, so they are lenient in shape (unknown fields
ignored, numbers where text is meant) and strict in size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field

from tunefleet.protocol.fields import (
    Forgiving,
    Identifier,
    Labels,
    LogStream,
    ProgressObject,
    ReportedJobStatus,
    RequestModel,
    ResponseModel,
    ShortText,
    VersionText,
    WorkerType,
    truncating,
)

MAX_GPUS = 1024
MAX_VRAM_GB = 1_000_000
MAX_LOG_LINES = 1000
MAX_LOG_LINE_CHARS = 8192
MAX_ERROR_CHARS = 8192
MAX_FAILURE_TAIL_LINES = 40
MAX_FAILURE_NOTE_CHARS = 512
MAX_SAMPLES = 1024


def _none_as_zero(value: Any) -> Any:
    return 0 if value is None else value


class GpuInfo(RequestModel):
    """A machine's GPUs, the one spelling tunefleet stores (``gpu_info`` on the wire).

    SimpleTuner's agent sends ``{"name": "Unknown", "vram_gb": null, "count": 0,
    "accelerator": null}`` when it finds no GPU, and ``driver`` is its CUDA version.
    """

    name: ShortText | None = None
    vram_gb: float | None = Field(default=None, ge=0, le=MAX_VRAM_GB)
    count: Annotated[int, BeforeValidator(_none_as_zero)] = Field(default=0, ge=0, le=MAX_GPUS)
    accelerator: VersionText | None = None
    driver: VersionText | None = None
    cuda: VersionText | None = None


class GpuDeviceReport(RequestModel):
    """One device as tunefleet's agent lists it."""

    index: int = Field(ge=0, le=MAX_GPUS)
    name: ShortText | None = None
    vram_gb: float | None = Field(default=None, ge=0, le=MAX_VRAM_GB)
    uuid: ShortText | None = None


class ReportedGpus(GpuInfo):
    """``gpu_info`` as an agent sends it: tunefleet's agent lists each device too. The
    orchestrator keeps the summary (GpuInfo), which is what matching reads, and never
    refuses a registration over the list."""

    devices: Annotated[
        Annotated[list[GpuDeviceReport], Field(max_length=MAX_GPUS)] | None, Forgiving
    ] = None


class RegisterRequest(RequestModel):
    """POST /api/workers/register. GPUs may come nested (``gpu_info``, SimpleTuner's agent)
    or flat (``gpu_count``, ``gpu_name``, ``gpu_vram_gb``, ``accelerator_type``, the seed
    document); ``gpu()`` merges them, nested values first."""

    name: ShortText = Field(min_length=1)
    gpu_info: ReportedGpus | None = None
    gpu_count: int | None = Field(default=None, ge=0, le=MAX_GPUS)
    gpu_name: ShortText | None = None
    gpu_vram_gb: float | None = Field(default=None, ge=0, le=MAX_VRAM_GB)
    accelerator_type: VersionText | None = None
    persistent: bool | None = None
    provider: ShortText | None = None
    labels: Labels | None = None
    current_job_id: Identifier | None = None
    # Sent by tunefleet's agent; SimpleTuner's does not.
    hostname: ShortText | None = None
    agent: ShortText | None = Field(default=None, examples=["tunefleet"])
    agent_version: VersionText | None = None
    # tunefleet's agent: the programs it will run (--allowed-commands), so the scheduler
    # does not send it a job it would refuse. Absent: not said.
    allowed_commands: Annotated[list[ShortText], Field(max_length=64)] | None = None

    def gpu(self) -> GpuInfo:
        """The GPU report in the one stored spelling."""
        nested = (
            self.gpu_info.model_dump(exclude_unset=True, exclude={"devices"})
            if self.gpu_info
            else {}
        )
        flat = {
            "count": self.gpu_count,
            "name": self.gpu_name,
            "vram_gb": self.gpu_vram_gb,
            "accelerator": self.accelerator_type,
        }
        merged = {k: v for k, v in flat.items() if v is not None}
        merged.update({k: v for k, v in nested.items() if v is not None})
        return GpuInfo.model_validate(merged)


class ResumeJob(ResponseModel):
    job_id: str
    config_name: str | None = None
    status: str


def _none_if_empty(value: Any) -> Any:
    return value or None


class RegisterResponse(ResponseModel):
    """The protocol's four fields, and tunefleet's additions: the administrator's ``name``
    and ``worker_type`` (in force; tunefleet's agent follows them) and ``warnings`` where
    the agent's own settings disagree. tunefleet's agent reads an answer that lacks
    something (SimpleTuner's server sends no additions) field by field."""

    worker_id: str = Field(min_length=1, examples=["w_abc123"])
    sse_url: str = Field(examples=["/api/workers/stream?worker_id=w_abc123"])
    resume_job: Annotated[ResumeJob | None, Forgiving] = None
    abandon_job: Annotated[str | None, Forgiving, AfterValidator(_none_if_empty)] = None
    name: Annotated[str | None, Forgiving, AfterValidator(_none_if_empty)] = None
    worker_type: Annotated[WorkerType | None, Forgiving] = None
    warnings: Annotated[list[str], Forgiving] = Field(default_factory=list)

    @classmethod
    def read(cls, data: Mapping[str, Any]) -> RegisterResponse:
        """The answer as an agent reads it: the stream's URL is the protocol's own when
        the answer names none. ValidationError when it names no worker id."""
        sse_url = data.get("sse_url")
        if not (isinstance(sse_url, str) and sse_url):
            sse_url = f"/api/workers/stream?worker_id={data.get('worker_id')}"
        return cls.model_validate({**data, "sse_url": sse_url})


class StandbyRefusal(ResponseModel):
    """A standby's 503 to every API and worker request: why, and where the active
    orchestrator is (null: not known yet). An agent given several URLs moves to that one
    when it is among them."""

    detail: Annotated[str, Forgiving] = ""
    active_url: Annotated[str | None, Forgiving] = Field(
        default=None, examples=["https://orch-a.example.com:8001"]
    )


def _samples(value: Any) -> Any:
    # One number where a per-GPU list is meant (a one-GPU agent) is that list of one.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [value]
    return value


Samples = Annotated[
    list[Annotated[float, Field(ge=0, le=1e9)]],
    BeforeValidator(_samples),
    Field(max_length=MAX_SAMPLES),
]


MAX_XIDS = 64
# tunefleet/gpu_health.py's THROTTLE_REASONS (a test holds them equal).
ThrottleReason = Literal[
    "sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"
]


class GpuHealthReport(RequestModel):
    """One GPU's health as tunefleet's agent reads it through NVML. Every field but
    ``index`` may be null: unknown (NVML said NotSupported or failed), never a problem by
    itself. A field that cannot be read is read as unknown, so an odd one never costs
    the heartbeat."""

    index: int = Field(ge=0, le=MAX_GPUS)
    uuid: Annotated[ShortText | None, Forgiving] = None
    ecc_uncorrectable: Annotated[int | None, Field(ge=0, le=2**53), Forgiving] = Field(
        default=None, description="Uncorrectable ECC errors since the driver loaded (volatile)"
    )
    retired_pages_pending: Annotated[bool | None, Forgiving] = None
    remapped_rows_pending: Annotated[bool | None, Forgiving] = None
    remapping_failed: Annotated[bool | None, Forgiving] = None
    throttle_reasons: Annotated[
        Annotated[list[ThrottleReason], Field(max_length=8)] | None, Forgiving
    ] = Field(default=None, description="Active clock throttle reasons")
    temperature_c: Annotated[float | None, Field(ge=-100, le=1000), Forgiving] = None
    xids: Annotated[
        Annotated[list[Annotated[int, Field(ge=0, le=2**31)]], Field(max_length=MAX_XIDS)] | None,
        Forgiving,
    ] = Field(
        default=None,
        description="Xid codes seen on this GPU since the agent started (each once); "
        "null: the NVML event API is not supported here",
    )


class GpuHealthSample(RequestModel):
    """``gpu_health`` in a heartbeat (tunefleet's agent; older orchestrators ignore it)."""

    gpus: Annotated[list[GpuHealthReport], Field(max_length=MAX_GPUS), Forgiving] = Field(
        default_factory=list
    )
    missing: Annotated[Annotated[list[ShortText], Field(max_length=MAX_GPUS)] | None, Forgiving] = (
        Field(
            default=None,
            description="UUIDs of GPUs registered at the agent's start that NVML no longer "
            "lists; null: unknown",
        )
    )
    registered: Annotated[int | None, Field(ge=0, le=MAX_GPUS), Forgiving] = None


class HeartbeatRequest(RequestModel):
    """POST /api/workers/heartbeat, every 30 s. SimpleTuner's agent sends ``worker_id``,
    ``status`` and ``current_job_id``; tunefleet's adds progress, GPU samples and GPU
    health (``gpu_health``; an unreadable one is read as absent, never refused)."""

    worker_id: Identifier | None = None
    status: Annotated[ShortText, Field(max_length=32)] | None = None
    current_job_id: Identifier | None = None
    job_progress: ProgressObject | None = None
    gpu_utilization: Samples | None = None
    vram_used_gb: Samples | None = None
    gpu_health: Annotated[GpuHealthSample | None, Forgiving] = None


class OutputsReport(RequestModel):
    """What a `completed` report says of the job's outputs (tunefleet's agent sends it:
    `completed` means stored; SimpleTuner's sends none)."""

    stored: bool
    keys: int | None = Field(default=None, ge=0, le=2**53)
    bytes: int | None = Field(default=None, ge=0, le=2**63)
    reason: (
        Annotated[
            str, BeforeValidator(truncating(MAX_ERROR_CHARS)), Field(max_length=MAX_ERROR_CHARS)
        ]
        | None
    ) = None


class FailureEvidence(RequestModel):
    """What only the agent sees about a failed attempt (tunefleet's agent sends it with
    a ``failed`` report; SimpleTuner's does not, and orchestrators before issue 26
    ignore it): tunefleet/fsm/failure_kinds.py tells a machine's fault from the job's."""

    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31)
    signal: Annotated[str, Field(max_length=32)] | None = Field(
        default=None, description="The signal that ended the trainer (SIGKILL, SIGSEGV, ...)"
    )
    oom: (
        Annotated[
            str,
            BeforeValidator(truncating(MAX_FAILURE_NOTE_CHARS)),
            Field(max_length=MAX_FAILURE_NOTE_CHARS),
        ]
        | None
    ) = Field(
        default=None,
        description="The agent saw the kernel's OOM killer act (its cgroup's memory.events)",
    )
    log_tail: list[
        Annotated[
            str,
            BeforeValidator(truncating(MAX_LOG_LINE_CHARS)),
            Field(max_length=MAX_LOG_LINE_CHARS),
        ]
    ] = Field(default_factory=list, max_length=MAX_FAILURE_TAIL_LINES)


class JobStatusRequest(RequestModel):
    """POST /api/workers/job/{job_id}/status. ``training`` is SimpleTuner's word for
    running. A long ``error`` is shortened, not refused: the report matters more."""

    status: ReportedJobStatus
    progress: ProgressObject | None = None
    error: (
        Annotated[
            str, BeforeValidator(truncating(MAX_ERROR_CHARS)), Field(max_length=MAX_ERROR_CHARS)
        ]
        | None
    ) = None
    # tunefleet's agent says which dispatch it reports on, so a stale report is told apart.
    attempt: int | None = Field(default=None, ge=1, le=10_000)
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31)
    outputs: OutputsReport | None = None
    failure: FailureEvidence | None = None
    resumed_from: (
        Annotated[str, Field(pattern=r"^checkpoint-[0-9]{1,12}$", max_length=24)] | None
    ) = Field(
        default=None,
        description="The stored checkpoint the trainer was started from (tunefleet's agent "
        "sends it once it has restored one); the timeline shows it",
    )


class LogLine(RequestModel):
    seq: int = Field(ge=0, le=2**53)
    stream: LogStream
    line: Annotated[
        str, BeforeValidator(truncating(MAX_LOG_LINE_CHARS)), Field(max_length=MAX_LOG_LINE_CHARS)
    ]
    at: float = Field(ge=0, le=1e11, description="Unix seconds when the agent read the line")


def log_line(seq: int, stream: str, line: str, at: float) -> dict[str, Any]:
    """One LogLine as it goes on the wire, built without pydantic: an agent sends
    thousands a second (a pydantic round trip costs ~30 times as much). A test holds it
    to LogLine."""
    return {"seq": seq, "stream": stream, "line": line, "at": at}


class JobLogsRequest(RequestModel):
    """POST /api/workers/job/{job_id}/logs (tunefleet's agent): at most 1000 lines; a line
    over 8192 characters is cut, with a marker saying how much."""

    attempt: int | None = Field(default=None, ge=1, le=10_000)
    lines: list[LogLine] = Field(max_length=MAX_LOG_LINES)


class LogBatchResponse(ResponseModel):
    """The answer to a log batch: how many of its lines were new (a batch sent again after
    a lost answer stores none twice), how many were dropped past the attempt's log quota,
    and whether that quota is reached (not an error: the job goes on, its log does not)."""

    success: bool = True
    stored: int = Field(ge=0)
    dropped: int = Field(default=0, ge=0)
    quota_reached: bool = False


class WorkerIdQuery(RequestModel):
    """``?worker_id=`` of GET /api/workers/stream and GET /api/workers/queue."""

    worker_id: Identifier | None = None


class QueueCheckResponse(ResponseModel):
    # Always sent; an agent reads an answer it cannot read as "no" (it then leaves, as an
    # ephemeral worker without work does).
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    has_jobs: Annotated[bool, Forgiving] = False


class DisconnectRequest(RequestModel):
    worker_id: Identifier | None = None
    reason: ShortText | None = None
