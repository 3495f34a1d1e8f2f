"""Concurrency limit wire schemas (issue 24), in SimpleTuner's spelling: a global
`max_concurrent`, a per-user `user_max_concurrent`, per team `max_jobs` and `max_gpus`.
0 or null is unlimited."""

from __future__ import annotations

from pydantic import Field

from tunefleet.http.schemas_common import ResponseModel, StrictRequestModel

MAX_LIMIT = 1_000_000

Limit = int | None


class ConcurrencyRequest(StrictRequestModel):
    """POST /api/queue/concurrency: a field left out keeps its value."""

    max_concurrent: Limit = Field(
        default=None, ge=0, le=MAX_LIMIT, description="Jobs running in the fleet; 0/null: no limit"
    )
    user_max_concurrent: Limit = Field(
        default=None, ge=0, le=MAX_LIMIT, description="Jobs running per user; 0/null: no limit"
    )


class TeamLimitsView(ResponseModel):
    max_jobs: int | None = None
    max_gpus: int | None = None


class ConcurrencyResponse(ResponseModel):
    max_concurrent: int | None = None
    user_max_concurrent: int | None = None
    teams: dict[str, TeamLimitsView] = Field(
        default_factory=dict, description="Teams with a limit set"
    )


class TeamLimitsRequest(StrictRequestModel):
    """POST /api/admin/teams/{name}/limits: a field left out keeps its value."""

    max_jobs: Limit = Field(default=None, ge=0, le=MAX_LIMIT, description="0/null: no limit")
    max_gpus: Limit = Field(default=None, ge=0, le=MAX_LIMIT, description="0/null: no limit")


class TeamLimitsResponse(ResponseModel):
    team: str
    max_jobs: int | None = None
    max_gpus: int | None = None
    warning: str | None = Field(
        default=None, description="Set when max_gpus is above the GPUs the fleet has now"
    )


class QueueJobLine(ResponseModel):
    job_id: str
    name: str | None = None
    status: str
    priority: int
    gpu_count: int
    team: str | None = None


class QueueMeResponse(ResponseModel):
    pending_count: int
    running_count: int
    blocked_count: int = Field(description="Jobs awaiting approval")
    best_position: int | None = Field(
        default=None, description="Queue position of the caller's next job; null: none pending"
    )
    pending_jobs: list[QueueJobLine]
    running_jobs: list[QueueJobLine]
    awaiting_approval: list[QueueJobLine]


class OwnerCounts(ResponseModel):
    pending: int
    running: int = Field(description="Jobs holding a worker (dispatched or running)")
    gpus: int = Field(description="GPUs those jobs hold")
