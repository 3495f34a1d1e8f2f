"""Queue wire schemas (``Authorization: Bearer``): submit, list, detail, cancel, position,
statistics and logs of jobs."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from tunefleet.http.schemas_common import (
    ConfigObject,
    DataloaderJson,
    Identifier,
    JobStatus,
    LabelGlobs,
    LogStream,
    PlainName,
    RequestModel,
    ResponseModel,
    ShortText,
    StrictRequestModel,
    SuccessResponse,
    Target,
    scalars_as_text,
)
from tunefleet.http.schemas_limits import OwnerCounts
from tunefleet.http.schemas_quotas import TeamStanding

MAX_PAGE = 500
MAX_METRIC_POINTS = 10_000
DEFAULT_PAGE = 50
MAX_GPUS = 1024
MAX_TIMEOUT_MINUTES = 43_200  # 30 days
MAX_COMMAND_ARGS = 256
MAX_ENV_VARS = 128
MAX_ENV_VALUE = 32 * 1024
HIDDEN_ENV_VALUE = "<hidden>"

_CONFIG_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._ -]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _config_name(value: str) -> str:
    # The name becomes a path under the configs directory: no absolute paths, no "..".
    segments = value.split("/")
    if not all(_CONFIG_SEGMENT.fullmatch(s) and s.strip() == s for s in segments):
        raise ValueError(
            "use letters, digits, '.', '_', '-' and spaces, with '/' between folder names; "
            "no '..', no leading '/' or '.'"
        )
    return value


ConfigName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_config_name)]


def _command_in(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError:
            raise ValueError("unbalanced quotes; send a list of strings") from None
    return value


def _no_nul_items(args: list[str]) -> list[str]:
    if any("\x00" in a for a in args):
        raise ValueError("must not contain NUL characters")
    return args


CommandLine = Annotated[
    list[Annotated[str, Field(max_length=4096)]],
    BeforeValidator(_command_in),
    Field(min_length=1, max_length=MAX_COMMAND_ARGS),
    AfterValidator(_no_nul_items),
]


def _check_env(env: dict[str, str]) -> dict[str, str]:
    if len(env) > MAX_ENV_VARS:
        raise ValueError(f"at most {MAX_ENV_VARS} variables")
    for name, value in env.items():
        if not (len(name) <= 128 and _ENV_NAME.fullmatch(name)):
            raise ValueError(
                f"{name[:40]!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
            )
        if len(value) > MAX_ENV_VALUE or "\x00" in value:
            raise ValueError(f"{name} must be at most {MAX_ENV_VALUE} characters without NUL")
    return env


EnvVars = Annotated[
    dict[
        Annotated[str, Field(min_length=1, max_length=128)],
        Annotated[str, Field(max_length=MAX_ENV_VALUE)],
    ],
    BeforeValidator(scalars_as_text),
    AfterValidator(_check_env),
]


class SubmitJobRequest(StrictRequestModel):
    """POST /api/queue/submit. Send ``config_name`` (a configuration the orchestrator has)
    or ``config`` (the configuration itself), not both. ``target`` defaults to ``auto``."""

    config_name: ConfigName | None = None
    config: ConfigObject | None = None
    dataloader: DataloaderJson = None
    name: Annotated[ShortText, Field(max_length=128)] | None = None
    target: Target = "auto"
    worker_labels: LabelGlobs = Field(default_factory=dict)
    gpu_count: int | None = Field(
        default=None,
        ge=0,
        le=MAX_GPUS,
        description="GPUs the job needs; unset: the config's num_processes, else 0 (any worker)",
    )
    min_vram_gb: float | None = Field(default=None, ge=0, le=1_000_000)
    gpu_name: Annotated[ShortText, Field(max_length=128)] | None = Field(
        default=None, description="A glob"
    )
    priority: int = Field(default=0, ge=-100, le=100)
    max_retries: int | None = Field(
        default=None, ge=0, le=20, description="Unset: the server's default (3)"
    )
    timeout_minutes: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_MINUTES)
    command: CommandLine | None = None
    env: EnvVars = Field(default_factory=dict)
    team: PlainName | None = Field(
        default=None, description="One of the submitter's teams; unset: their default team"
    )

    @model_validator(mode="after")
    def _one_config(self) -> SubmitJobRequest:
        if self.config_name is None and self.config is None:
            raise ValueError(
                "config_name: required; send config_name (a named configuration) or config "
                "(an inline object)"
            )
        if self.config_name is not None and self.config is not None:
            raise ValueError("send config_name or config, not both")
        return self


class SubmitJobResponse(ResponseModel):
    success: bool
    job_id: str | None = None
    status: str | None = None
    allocated_worker_id: str | None = None
    queue_position: int | None = None
    reason: str | None = Field(default=None, description="Why it waits, while it does")
    error: str | None = None
    budget_warning: str | None = Field(
        default=None,
        description="Set when the team's GPU-hour budget (action warn) is spent: the numbers "
        "and when it renews",
    )


def _split_statuses(value: Any) -> Any:
    if isinstance(value, str):
        return [s.strip() for s in value.split(",") if s.strip()]
    if isinstance(value, list):
        return [s.strip() for v in value if isinstance(v, str) for s in v.split(",") if s.strip()]
    return value


class JobListQuery(RequestModel):
    """GET /api/queue?status=pending,running&target=worker&user=alice&team=ml&limit=50"""

    status: Annotated[list[JobStatus], BeforeValidator(_split_statuses)] | None = None
    target: Target | None = None
    worker_id: Identifier | None = None
    user: PlainName | None = Field(default=None, description="Only this user's jobs")
    team: PlainName | None = Field(default=None, description="Only this team's jobs")
    limit: int = Field(default=DEFAULT_PAGE, ge=1, le=MAX_PAGE)
    offset: int = Field(default=0, ge=0, le=10**9)


class JobSummary(ResponseModel):
    job_id: str
    name: str | None = None
    config_name: str | None = None
    status: JobStatus
    target: Target
    worker_id: str | None = None
    priority: int = 0
    attempts: int = Field(default=0, description="Dispatches so far")
    undelivered: int = Field(
        default=0, description="Dispatches that never reached their worker (spent no retry)"
    )
    preempted: int = Field(default=0, description="Attempts that were preempted (spent no retry)")
    infrastructure_failures: int = Field(
        default=0,
        description="Attempts the infrastructure ended (worker lost, OOM-killed, CUDA, Xid, "
        "disk full): they spend the server's --infra-retries, not a retry",
    )
    max_retries: int = 3
    gpu_count: int = 1
    min_vram_gb: float | None = None
    gpu_name: str | None = None
    worker_labels: dict[str, str] = Field(default_factory=dict)
    timeout_minutes: float | None = None
    submitted_by: str | None = None
    user: str | None = Field(default=None, description="Whose job it is")
    team: str | None = Field(default=None, description="The team it was submitted for")
    submitted_at: str | None = None
    dispatched_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    progress: dict[str, Any] | None = None
    error: str | None = None
    wait_reason: str | None = None
    queue_position: int | None = None


class AttemptView(ResponseModel):
    number: int
    worker_id: str | None = None
    dispatched_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    outcome: str | None = None
    reason: str | None = None
    kind: str | None = Field(
        default=None,
        description="Why it ended: job_error, infrastructure, worker_shutdown, timeout, "
        "cancelled, preempted or undelivered (none: it completed, or runs)",
    )
    signature: str | None = Field(
        default=None,
        description="A job error's one line (numbers and paths stripped), or what gave an "
        'infrastructure failure away ("Xid 79 on GPU 1", "OOM-killed")',
    )
    log_bytes: int = Field(
        default=0, description="The attempt's stored log, as its quota counts it"
    )
    log_lines_dropped: int = Field(
        default=0, description="Lines dropped past the attempt's log quota"
    )
    gpu_seconds: float = Field(
        default=0,
        description="GPUs held x time from dispatch to the attempt's end (or now, while it "
        "runs), whatever its outcome",
    )


class TimelineEntry(ResponseModel):
    at: str
    kind: str
    worker_id: str | None = None
    attempt: int | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class JobDetail(JobSummary):
    """One job with its configuration, every attempt and its timeline. Environment values
    are shown as ``<hidden>``: they often hold secrets."""

    config: dict[str, Any] = Field(default_factory=dict)
    dataloader: DataloaderJson = None
    command: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    attempt_history: list[AttemptView] = Field(default_factory=list)
    timeline: list[TimelineEntry] = Field(default_factory=list)


def hide_env_values(env: Mapping[str, str]) -> dict[str, str]:
    return dict.fromkeys(env, HIDDEN_ENV_VALUE)


class JobListResponse(ResponseModel):
    jobs: list[JobSummary]
    total: int
    limit: int
    offset: int


class CancelJobRequest(StrictRequestModel):
    reason: ShortText | None = None


class CancelJobResponse(SuccessResponse):
    job_id: str
    status: JobStatus


class PositionResponse(ResponseModel):
    """``position`` is 1 for the next job to go; null once the job left the queue."""

    job_id: str
    position: int | None = None
    status: JobStatus
    reason: str | None = None


class WorkerCounts(ResponseModel):
    total: int = 0
    idle: int = 0
    busy: int = 0
    draining: int = 0
    offline: int = 0
    connecting: int = 0


class QueueStatsResponse(ResponseModel):
    queue_depth: int = Field(description="Pending jobs")
    pending_approval: int = Field(default=0, description="Jobs awaiting approval")
    running: int
    dispatched: int
    completed: int
    failed: int
    cancelled: int
    avg_wait_seconds: float | None = None
    workers: WorkerCounts
    max_concurrent: int | None = Field(default=None, description="null: no limit")
    user_max_concurrent: int | None = Field(default=None, description="null: no limit")
    by_user: dict[str, OwnerCounts] = Field(
        default_factory=dict, description="Live jobs per user the caller may see"
    )
    by_team: dict[str, OwnerCounts] = Field(
        default_factory=dict, description="Live jobs per team the caller may see"
    )
    fair_share: dict[str, TeamStanding] = Field(
        default_factory=dict,
        description="Per team with a quota or GPUs held: quota, use, borrowed, standing",
    )


class JobLogsQuery(RequestModel):
    """GET /api/queue/{job_id}/logs?from_seq=0&limit=1000[&follow=true]"""

    from_seq: int = Field(default=0, ge=0, le=2**53, description="First seq to return")
    limit: int = Field(default=1000, ge=1, le=5000)
    attempt: int | None = Field(default=None, ge=1, le=10_000)
    stream: LogStream | None = None
    follow: bool = Field(
        default=False,
        description="Stream new lines as Server-Sent Events until the job ends",
    )


class LogLineView(ResponseModel):
    seq: int
    attempt: int | None = None
    stream: LogStream | Literal["notice"] = Field(
        description="notice: the orchestrator's own line (the attempt's log quota reached)"
    )
    line: str
    at: str


class JobLogsResponse(ResponseModel):
    job_id: str
    lines: list[LogLineView]
    next_seq: int = Field(description="Pass as from_seq to get the lines after these")


class JobMetricsQuery(RequestModel):
    """GET /api/queue/{job_id}/metrics?since=0&limit=10000[&attempt=N][&format=csv]"""

    since: int = Field(
        default=0,
        ge=0,
        le=2**53,
        description="Points stored after this seq: pass next_since from the last answer",
    )
    limit: int = Field(default=MAX_METRIC_POINTS, ge=1, le=MAX_METRIC_POINTS)
    attempt: int | None = Field(default=None, ge=1, le=10_000)
    format: Literal["json", "csv"] = "json"


class MetricPointView(ResponseModel):
    seq: int
    attempt: int
    step: int
    at: str
    values: dict[str, float]


class JobMetricsResponse(ResponseModel):
    job_id: str
    points: list[MetricPointView]
    next_since: int = Field(description="Pass as since to get the points stored after these")
