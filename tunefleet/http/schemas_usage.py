"""Usage and budget wire schemas: GPU-seconds per user or team per UTC day, and teams'
GPU-hour budgets."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import Field

from tunefleet.budgets import BudgetAction, BudgetPeriod
from tunefleet.http.schemas_common import PlainName, RequestModel, ResponseModel, StrictRequestModel


class UsageQuery(RequestModel):
    """GET /api/usage?by=team&since=2026-11-01&until=2026-12-01[&format=csv]. Times are
    ISO 8601 dates or times (UTC unless they say otherwise) or epoch seconds."""

    by: Literal["user", "team"] = "team"
    since: dt.datetime | None = Field(
        default=None, description="Start of the window; default: 30 days before `until`"
    )
    until: dt.datetime | None = Field(default=None, description="End of the window; default: now")
    user: PlainName | None = Field(default=None, description="Only this user's attempts")
    team: PlainName | None = Field(default=None, description="Only this team's attempts")
    format: Literal["json", "csv"] = "json"


class UsageRowView(ResponseModel):
    day: str = Field(description="The UTC day, YYYY-MM-DD")
    name: str = Field(description="The user or team (`by`); '-' for jobs with none")
    gpu_seconds: float
    gpu_hours: float
    attempts: int = Field(description="Attempts that held GPUs on this day")


class UsageTotalView(ResponseModel):
    name: str
    gpu_seconds: float
    gpu_hours: float


class BudgetView(ResponseModel):
    team: str
    gpu_hours: float
    period: str
    action: str
    used_gpu_hours: float = Field(description="Used in the current period, up to now")
    period_start: str
    renews_at: str
    spent: bool


class UsageResponse(ResponseModel):
    by: str
    since: str
    until: str
    rows: list[UsageRowView]
    totals: list[UsageTotalView]
    total_gpu_seconds: float
    budgets: list[BudgetView] = Field(default_factory=list)


class SetBudgetRequest(StrictRequestModel):
    """POST /api/admin/teams/{name}/budget."""

    gpu_hours: float = Field(gt=0, le=1e9, description="GPU-hours per period")
    period: BudgetPeriod = "month"
    action: BudgetAction = "warn"


class TeamBudgetResponse(ResponseModel):
    team: str
    budget: BudgetView | None = None
