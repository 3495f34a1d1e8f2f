"""Approval endpoints: the rules an admin defines, the jobs awaiting approval, and the
decisions on them. Registered before routes_queue so /api/queue/approvals is not read
as a job id."""

from __future__ import annotations

import re

from aiohttp import web

from tunefleet.approval_rules import check_rule, describe
from tunefleet.audit import AuditKind
from tunefleet.fsm.job import JobState
from tunefleet.http import keys
from tunefleet.http.approval_access import check_may_decide, may_decide, rule_of
from tunefleet.http.body import parse_body
from tunefleet.http.errors import ApiError
from tunefleet.http.job_access import job_not_found
from tunefleet.http.job_views import job_summary
from tunefleet.http.route_table import actor_name, fleet_of, principal_of, routes
from tunefleet.http.schemas_approvals import (
    ApprovalListResponse,
    ApprovalRuleListResponse,
    ApprovalRuleView,
    CreateApprovalRuleRequest,
    DecisionResponse,
    RejectJobRequest,
)
from tunefleet.storage.rows import ApprovalRuleRow, JobRow

_RULES_AUTH = "api:admin.users"
_DECIDE_AUTH = "api:queue.approve"
# Enough for any real backlog of held jobs; the list is oldest first.
_MAX_LISTED = 500
_RULE_ID = re.compile(r"[0-9]{1,9}")


def _rule_view(row: ApprovalRuleRow) -> dict[str, object]:
    return {
        "id": row.id,
        "condition": row.condition,
        "threshold": row.threshold,
        "exempt_roles": list(row.exempt_roles),
        "enabled": row.enabled,
        "description": describe(rule_of(row)),
    }


@routes.route(
    "GET",
    "/api/admin/approval-rules",
    summary="The approval rules, in the order they are evaluated at submit",
    response=ApprovalRuleListResponse,
    auth=_RULES_AUTH,
)
async def list_rules(request: web.Request) -> web.StreamResponse:
    rows = await request.app[keys.STORE].approval_rules.rules()
    return web.json_response({"rules": [_rule_view(row) for row in rows]})


@routes.route(
    "POST",
    "/api/admin/approval-rules",
    summary="Add an approval rule; it is evaluated after those already there",
    request=CreateApprovalRuleRequest,
    response=ApprovalRuleView,
    auth=_RULES_AUTH,
)
async def add_rule(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, CreateApprovalRuleRequest)
    threshold = body.threshold.strip()
    refused = check_rule(body.condition, threshold)
    if refused is not None:
        raise ApiError(400, refused)
    row = await request.app[keys.STORE].approval_rules.add_rule(
        body.condition, threshold, body.exempt_roles, body.enabled
    )
    await request.app[keys.AUDIT].record(
        AuditKind.APPROVAL_RULE_ADDED,
        actor=actor_name(request),
        target=f"approval_rule:{row.id}",
        condition=row.condition,
        threshold=row.threshold,
    )
    return web.json_response(_rule_view(row))


@routes.route(
    "DELETE",
    "/api/admin/approval-rules/{rule_id}",
    summary="Delete an approval rule; jobs it already holds stay held",
    auth=_RULES_AUTH,
    errors={404: "No such rule"},
)
async def delete_rule(request: web.Request) -> web.StreamResponse:
    raw = request.match_info["rule_id"]
    rules = request.app[keys.STORE].approval_rules
    # ASCII digits of a size an id column holds ("²".isdigit() is true; int() refuses it).
    if not _RULE_ID.fullmatch(raw) or not await rules.delete_rule(int(raw)):
        raise ApiError(
            404, f"approval rule not found: {raw}; list them with GET /api/admin/approval-rules"
        )
    await request.app[keys.AUDIT].record(
        AuditKind.APPROVAL_RULE_DELETED, actor=actor_name(request), target=f"approval_rule:{raw}"
    )
    return web.json_response({"success": True, "id": int(raw)})


@routes.route(
    "GET",
    "/api/queue/approvals",
    summary="Jobs awaiting approval that the caller may decide, oldest first",
    response=ApprovalListResponse,
    auth=_DECIDE_AUTH,
)
async def list_approvals(request: web.Request) -> web.StreamResponse:
    principal = principal_of(request)
    rows = await request.app[keys.STORE].list_jobs(
        state=JobState.PENDING_APPROVAL, order="seq", limit=_MAX_LISTED
    )
    mine = [
        {**job_summary(row), "wait_reason": row.wait_reason}
        for row in rows
        if may_decide(principal, row)
    ]
    return web.json_response({"jobs": mine, "total": len(mine)})


async def _held_job(request: web.Request) -> JobRow:
    """The job to decide: 404 when it does not exist, 403 naming its team when the caller
    may not decide it (a lead of another team may learn whose job it is)."""
    job_id = request.match_info["job_id"]
    row = await request.app[keys.STORE].get_job(job_id)
    if row is None:
        raise job_not_found(job_id)
    check_may_decide(principal_of(request), row)
    return row


@routes.route(
    "POST",
    "/api/queue/{job_id}/approve",
    summary="Approve a job awaiting approval: it queues in its original place",
    response=DecisionResponse,
    auth=_DECIDE_AUTH,
    errors={
        403: "A lead decides only their own teams' jobs",
        404: "Job not found",
        409: "Not awaiting approval",
    },
)
async def approve_job(request: web.Request) -> web.StreamResponse:
    row = await _held_job(request)
    decided = await fleet_of(request).decide_approval(row.id, actor_name(request), approve=True)
    return web.json_response(decided)


@routes.route(
    "POST",
    "/api/queue/{job_id}/reject",
    summary="Reject a job awaiting approval: it ends cancelled, the reason as its error",
    request=RejectJobRequest,
    response=DecisionResponse,
    auth=_DECIDE_AUTH,
    errors={
        403: "A lead decides only their own teams' jobs",
        404: "Job not found",
        409: "Not awaiting approval",
    },
)
async def reject_job(request: web.Request) -> web.StreamResponse:
    row = await _held_job(request)
    body = await parse_body(request, RejectJobRequest)
    fleet = fleet_of(request)
    decided = await fleet.decide_approval(
        row.id, actor_name(request), approve=False, reason=body.reason
    )
    return web.json_response(decided)
