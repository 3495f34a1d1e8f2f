"""Admin wire schemas: the fleet (``admin.workers``), API tokens and the audit log.

Timestamps in responses are ISO 8601 UTC strings ending in ``Z``, as the seed document's
examples show; query filters accept ISO 8601 or unix seconds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from tunefleet.http.auth import PermissionName
from tunefleet.http.schemas_common import (
    Labels,
    PlainName,
    RequestModel,
    ResponseModel,
    ShortText,
    StrictRequestModel,
    SuccessResponse,
    WorkerStatus,
    WorkerType,
)

MAX_PAGE = 500

# --- workers ---------------------------------------------------------------------------


class WorkerListQuery(RequestModel):
    """GET /api/admin/workers?status=idle"""

    status: WorkerStatus | None = None


class WorkerSummary(ResponseModel):
    """One worker as the admin list shows it. ``id`` and ``worker_id`` are the same value
    (the seed document shows ``id``); ``labels`` are the effective labels (admin-assigned
    over agent-reported), ``agent_labels`` what the agent said about itself."""

    id: str
    worker_id: str
    name: str
    status: WorkerStatus
    worker_type: WorkerType
    gpu_count: int = 0
    gpu_name: str | None = None
    gpu_vram_gb: float | None = None
    gpu_info: dict[str, Any] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    current_job_id: str | None = None
    last_heartbeat: str | None = None
    connected_at: str | None = None
    created_at: str | None = None
    connected: bool = False
    uptime_seconds: float = 0.0
    drain_requested: bool = False
    agent_labels: dict[str, str] = Field(default_factory=dict)
    hostname: str | None = None
    client_address: str | None = None
    last_seen: str | None = None
    # Extras the orchestrator also shows; an older client ignores them.
    is_local: bool = False
    accelerator_type: str | None = None
    admin_labels: dict[str, str] = Field(default_factory=dict)
    provider: str | None = None
    gpu_utilization: list[float] = Field(default_factory=list)
    vram_used_gb: list[float] = Field(default_factory=list)
    job_progress: dict[str, Any] | None = None
    offline_at: str | None = None
    # What the agent said it runs (--allowed-commands); null: not said (any).
    allowed_commands: list[str] | None = None
    agent_name: str | None = Field(
        default=None, description="The name the agent registered with (--name)"
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="Where the agent's settings disagree with worker_type or the name",
    )
    quarantined: bool = Field(
        default=False,
        description="Takes no new job (a bad machine): automatically after repeated "
        "failures that were its fault or a GPU reading that turned unhealthy, or by an "
        "administrator; released by hand",
    )
    quarantine_reason: str | None = Field(
        default=None, description="Why it is quarantined, in one line"
    )
    quarantined_at: str | None = None
    health: Literal["healthy", "degraded", "unhealthy"] | None = Field(
        default=None,
        description="Its GPUs' health from the agent's last reading; null: its agent "
        "sends none (SimpleTuner's). A reading that turns unhealthy quarantines the worker",
    )
    health_reason: str | None = Field(
        default=None, description="The worst finding, one line: 'Xid 79 on GPU 1'"
    )
    health_problems: list[str] = Field(default_factory=list, description="Every finding")
    gpu_health: dict[str, Any] | None = Field(
        default=None,
        description="The agent's last reading as it sent it (docs/worker.md, GPU health)",
    )


class WorkerListResponse(ResponseModel):
    workers: list[WorkerSummary]
    total: int


class CreateWorkerRequest(StrictRequestModel):
    """POST /api/admin/workers. Unknown fields are refused: a misspelt ``labels`` must not
    silently create an unlabelled worker."""

    name: PlainName
    worker_type: WorkerType = "persistent"
    labels: Labels = Field(default_factory=dict)


class CreateWorkerQuery(RequestModel):
    """``?allow_duplicate=true`` creates a worker whose name another worker has."""

    allow_duplicate: bool = False


class CreateWorkerResponse(ResponseModel):
    """The token is in this response and nowhere else, ever."""

    worker_id: str
    token: str
    name: str
    worker_type: WorkerType
    labels: dict[str, str]
    connection_command: str = Field(
        description="A `tunefleet worker` command line that connects this worker"
    )
    environment: dict[str, str] = Field(
        description="The same settings as SIMPLETUNER_* environment variables"
    )


class UpdateWorkerLabelsRequest(StrictRequestModel):
    """Replace the admin-assigned labels of a worker."""

    labels: Labels


class WorkerActionResponse(ResponseModel):
    """Drain and resume: the worker's status afterwards."""

    success: bool = True
    worker_id: str
    status: WorkerStatus


class QuarantineRequest(StrictRequestModel):
    """POST /api/admin/workers/{id}/quarantine: why (optional; shown with the worker)."""

    reason: ShortText | None = None


class QuarantineResponse(WorkerActionResponse):
    """Quarantine and release: the worker's status and quarantine afterwards."""

    quarantined: bool
    quarantine_reason: str | None = None


class RotateTokenResponse(ResponseModel):
    """The old token stopped working when this was sent; its open stream is closed."""

    worker_id: str
    token: str
    connection_command: str
    environment: dict[str, str] = Field(default_factory=dict)


class DeleteWorkerQuery(RequestModel):
    """``?force=true`` deletes a worker that is not offline and requeues its job."""

    force: bool = False


class DeleteWorkerResponse(SuccessResponse):
    worker_id: str
    requeued_job_id: str | None = None


# --- API tokens ------------------------------------------------------------------------


def _unique(permissions: list[str]) -> list[str]:
    return list(dict.fromkeys(permissions))


class CreateApiTokenRequest(StrictRequestModel):
    """A token for ``user`` (default: the caller's own user), holding ``permissions``: no
    more than that user's role and grants allow, nor than the calling token holds. Unset:
    everything the user's role and grants allow. Empty: a token that only reads what its
    user may see (a viewer's)."""

    name: PlainName
    permissions: (
        Annotated[list[PermissionName], Field(max_length=16), AfterValidator(_unique)] | None
    ) = None
    user: PlainName | None = Field(
        default=None, description="Whose token it is; another user's needs admin.users"
    )


class ApiTokenCreated(ResponseModel):
    """The token is in this response and nowhere else, ever."""

    id: str
    name: str
    token: str
    permissions: list[str]
    user: str | None = None
    created_at: str | None = None


class ApiTokenInfo(ResponseModel):
    id: str
    name: str
    permissions: list[str]
    user: str | None = Field(default=None, description="The user the token acts for")
    created_at: str | None = None
    last_used_at: str | None = None
    revoked_at: str | None = None


class ApiTokenListResponse(ResponseModel):
    tokens: list[ApiTokenInfo]
    total: int


class RevokeApiTokenResponse(SuccessResponse):
    id: str


class WhoamiResponse(ResponseModel):
    """The calling token and its user, so a client can show what they may do and hide
    what they may not. ``permissions``: the token's, narrowed to the user's role."""

    kind: Literal["api"]
    id: str
    name: str
    permissions: list[str]
    user: str | None = None
    role: str | None = None
    teams: list[str] = Field(default_factory=list)
    default_team: str | None = None


# --- audit -----------------------------------------------------------------------------


def _timestamp(value: Any) -> Any:
    """Unix seconds, or ISO 8601 (``2024-01-15T10:30:00Z``; no zone means UTC)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("must be unix seconds or ISO 8601 (2024-01-15T10:30:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


Timestamp = Annotated[float, BeforeValidator(_timestamp), Field(ge=0, le=1e11)]


class AuditListQuery(RequestModel):
    """GET /api/audit: newest first."""

    kind: ShortText | None = None
    actor: ShortText | None = None
    target: ShortText | None = None
    outcome: ShortText | None = None
    since: Timestamp | None = None
    until: Timestamp | None = None
    limit: int = Field(default=100, ge=1, le=MAX_PAGE)
    offset: int = Field(default=0, ge=0, le=10**9)


class AuditEventView(ResponseModel):
    id: int
    at: str
    kind: str
    actor: str | None = None
    client_address: str | None = None
    target: str | None = None
    outcome: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)
    prev_hash: str | None = None
    hash: str


class AuditListResponse(ResponseModel):
    events: list[AuditEventView]
    total: int
    limit: int
    offset: int


class AuditVerifyResponse(ResponseModel):
    """Whether the hash chain is intact; ``first_bad_id`` is where it breaks."""

    ok: bool
    checked: int = 0
    first_bad_id: int | None = None
