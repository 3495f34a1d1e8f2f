"""Approval wire schemas: the rules an admin defines (``admin.users``) and the decisions
leads and admins take (``queue.approve``). Condition names follow SimpleTuner's rules
engine where one fits; approval_rules.py evaluates them."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from tunefleet.approval_rules import Condition
from tunefleet.http.roles import RoleName
from tunefleet.http.schemas_common import (
    JobStatus,
    ResponseModel,
    ShortText,
    StrictRequestModel,
    SuccessResponse,
)
from tunefleet.http.schemas_queue import JobSummary


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


class CreateApprovalRuleRequest(StrictRequestModel):
    """POST /api/admin/approval-rules. ``threshold``: a number for gpus_exceed,
    daily_jobs_exceed and gpu_hours_exceed; a glob for hardware_type (the job's gpu_name)
    and config_pattern (its config_name); empty for first_job."""

    condition: Condition
    threshold: Annotated[str, Field(max_length=200)] = ""
    exempt_roles: Annotated[list[RoleName], Field(max_length=4), AfterValidator(_unique)] = Field(
        default_factory=list, description="Roles whose submits this rule never holds"
    )
    enabled: bool = True


class ApprovalRuleView(ResponseModel):
    id: int
    condition: str
    threshold: str
    exempt_roles: list[str]
    enabled: bool
    description: str = Field(description='The rule in words, e.g. "more than 4 GPUs"')


class ApprovalRuleListResponse(ResponseModel):
    """In evaluation order: the first enabled rule that matches and does not exempt the
    submitter's role holds the job."""

    rules: list[ApprovalRuleView]


class RejectJobRequest(StrictRequestModel):
    reason: ShortText | None = None


class DecisionResponse(SuccessResponse):
    job_id: str
    status: JobStatus


class ApprovalListResponse(ResponseModel):
    """Jobs awaiting approval that the caller may decide, oldest first."""

    jobs: list[JobSummary]
    total: int
