"""Team quota wire schemas (issue 25): a nominal GPU quota in all and/or per flavor (a
gpu_name glob), a fair-share weight and a borrowing limit; and each team's standing."""

from __future__ import annotations

from pydantic import Field

from tunefleet.http.schemas_common import ResponseModel, StrictRequestModel

MAX_GPUS = 1_000_000


class TeamQuotaRequest(StrictRequestModel):
    """POST /api/admin/teams/{name}/quota: a field left out keeps its value."""

    gpus: int | None = Field(
        default=None, ge=0, le=MAX_GPUS, description="Nominal GPUs in all; null: none"
    )
    flavors: dict[str, int] | None = Field(
        default=None,
        description='Nominal GPUs per gpu_name glob (case-insensitive), e.g. {"*A100*": 8}; '
        "{} or null: none",
    )
    weight: float | None = Field(
        default=None, gt=0, le=1_000_000, description="Fair-share weight (above 0; default 1)"
    )
    borrow_limit: int | None = Field(
        default=None,
        ge=0,
        le=MAX_GPUS,
        description="GPUs it may borrow beyond its quota; null: no limit",
    )


class TeamQuotaView(ResponseModel):
    gpus: int | None = None
    flavors: dict[str, int] = Field(default_factory=dict)
    weight: float = 1.0
    borrow_limit: int | None = None


class TeamQuotaResponse(ResponseModel):
    team: str
    quota: TeamQuotaView
    warnings: list[str] = Field(
        default_factory=list,
        description="A flavor no worker matches now; quotas adding up past the fleet",
    )


class TeamStanding(ResponseModel):
    quota: TeamQuotaView
    used_gpus: int = Field(description="GPUs its jobs hold now")
    borrowed_gpus: int = Field(description="Of those, beyond its quota")
    standing: float = Field(description="Decayed GPU-seconds / weight; lower goes first")
    preemptions: int = Field(description="Its jobs chosen for preemption since the start")
