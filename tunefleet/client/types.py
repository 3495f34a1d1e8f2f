"""What the client's methods return: the API's JSON, typed.

The orchestrator's answers are kept whole as dicts (so a field a newer orchestrator
adds is not lost, and ``json.dumps`` prints them as the API sent them); these
``TypedDict``\\ s name the fields a caller relies on, for editors and mypy. docs/api.md
describes every field. What the client makes itself (a finished download) is a
dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict

from tunefleet.protocol.states import JobStatusName, WorkerStatusName

JobStatus: TypeAlias = JobStatusName
WorkerStatus: TypeAlias = WorkerStatusName
Target: TypeAlias = Literal["worker", "local", "auto"]


class Submitted(TypedDict):
    """``POST /api/queue/submit``'s answer."""

    success: bool
    job_id: str
    status: JobStatus
    allocated_worker_id: str | None
    queue_position: int | None
    reason: str | None
    error: str | None
    budget_warning: NotRequired[str]


class Attempt(TypedDict):
    number: int
    worker_id: str | None
    dispatched_at: str | None
    started_at: str | None
    ended_at: str | None
    outcome: str | None
    reason: str | None


class Job(TypedDict):
    """A job (``GET /api/queue/{job_id}``; list items lack the detail-only fields)."""

    job_id: str
    name: str | None
    config_name: str | None
    status: JobStatus
    target: Target
    worker_id: str | None
    priority: int
    attempts: int
    undelivered: int
    preempted: int  # attempts ended by a preemption (they spend no retry)
    infrastructure_failures: int  # attempts the infrastructure ended (--infra-retries)
    max_retries: int
    gpu_count: int | None
    user: str | None
    team: str | None
    submitted_by: str | None
    submitted_at: str | None
    started_at: str | None
    finished_at: str | None
    progress: dict[str, Any] | None
    error: str | None
    wait_reason: str | None
    queue_position: int | None
    attempt_history: NotRequired[list[Attempt]]
    timeline: NotRequired[list[dict[str, Any]]]
    config: NotRequired[dict[str, Any] | None]
    command: NotRequired[list[str] | None]


class JobPage(TypedDict):
    """``GET /api/queue``: a page of jobs, newest first."""

    jobs: list[Job]
    total: int
    limit: int
    offset: int


class Cancelled(TypedDict):
    success: bool
    job_id: str
    status: JobStatus


class Quarantine(TypedDict):
    """A worker's quarantine after ``quarantine`` or ``release``."""

    success: bool
    worker_id: str
    status: WorkerStatus
    quarantined: bool
    quarantine_reason: str | None


class Preempting(TypedDict):
    """A preemption under way: the job is requeued once its trainer has stopped."""

    success: bool
    job_id: str
    status: Literal["preempting"]
    attempt: int
    worker_id: str | None
    grace_seconds: float


class LogLine(TypedDict):
    """One output line: ``stream`` is stdout, stderr, or the orchestrator's notice."""

    seq: int
    attempt: int
    stream: Literal["stdout", "stderr", "notice"]
    line: str
    at: str


class MetricPoint(TypedDict):
    """The numbers one progress report gave for a step (loss, lr, ...)."""

    seq: int
    attempt: int
    step: int
    at: str
    values: dict[str, float]


class Artifact(TypedDict):
    """A stored output: ``key`` is its path under the job's output directory."""

    key: str
    size: int
    sha256: str | None
    attempt: int
    created_at: str


class Checkpoint(TypedDict):
    name: str
    step: int
    attempt: int
    bytes: int
    created_at: str


class Artifacts(TypedDict):
    """``GET /api/queue/{job_id}/artifacts``: outputs, and complete checkpoints newest
    first."""

    job_id: str
    artifacts: list[Artifact]
    checkpoints: list[Checkpoint]


class Worker(TypedDict):
    """A worker (``GET /api/admin/workers``)."""

    id: str
    name: str
    status: WorkerStatus
    connected: bool
    worker_type: str | None
    gpu_count: int | None
    gpu_name: str | None
    gpu_vram_gb: float | None
    labels: dict[str, str]
    current_job_id: str | None
    last_heartbeat: str | None
    # A bad machine takes no new job until an admin releases it (docs/troubleshooting.md).
    quarantined: bool
    quarantine_reason: str | None


@dataclass(frozen=True, slots=True)
class Downloaded:
    """One artifact on disk, its checksum checked against the stored one."""

    key: str
    path: Path
    size: int
    sha256: str
