"""Approval at the HTTP edge: which rule holds a submit (read from the store, evaluated by
approval_rules), and who may decide a held job (a lead for their teams' jobs, an admin
for any)."""

from __future__ import annotations

from aiohttp import web

from tunefleet.actors.records import JobRecord
from tunefleet.approval_rules import ApprovalRule, Submission, holding_rule, wait_reason
from tunefleet.http import keys
from tunefleet.http.auth import QUEUE_ADMIN, ApiPrincipal
from tunefleet.http.errors import ApiError
from tunefleet.http.roles import ADMIN
from tunefleet.storage.rows import ApprovalRuleRow, JobRow
from tunefleet.storage.store_base import JobOwner

_DAY_S = 86_400
# The conditions that need the submitter's job history (one or two counts per submit).
_HISTORY = frozenset({"first_job", "daily_jobs_exceed"})


def rule_of(row: ApprovalRuleRow) -> ApprovalRule:
    return ApprovalRule(
        row.condition, row.threshold, frozenset(row.exempt_roles), row.enabled, row.id
    )


async def approval_hold(
    request: web.Request, principal: ApiPrincipal, rec: JobRecord, now: float
) -> str | None:
    """Why an approval rule holds this submit (its wait reason), or None to queue it."""
    store = request.app[keys.STORE]
    rules = [rule_of(row) for row in await store.approval_rules.rules() if row.enabled]
    if not rules:
        return None
    jobs_before = jobs_today = 0
    if any(rule.condition in _HISTORY for rule in rules):
        owner = JobOwner(user_name=principal.user)
        jobs_before = await store.count_jobs(owner=owner)
        # Only whether today's count passes the largest threshold matters: read no more.
        daily = [int(float(r.threshold)) for r in rules if r.condition == "daily_jobs_exceed"]
        recent = await store.list_jobs(owner=owner, limit=max(daily, default=0) + 1)
        midnight = now - now % _DAY_S  # UTC
        jobs_today = sum(1 for row in recent if (row.submitted_at or 0.0) >= midnight)
    submission = Submission(
        role=principal.role or "",
        gpu_count=rec.gpu_count,
        gpu_name=rec.gpu_name,
        config_name=rec.config_name,
        timeout_minutes=rec.timeout_minutes,
        jobs_before=jobs_before,
        jobs_today=jobs_today,
    )
    rule = holding_rule(rules, submission)
    return None if rule is None else wait_reason(rule, rec.team_name)


def may_decide(principal: ApiPrincipal, row: JobRow) -> bool:
    if principal.role == ADMIN or principal.has(QUEUE_ADMIN):
        return True
    return row.team_name is not None and row.team_name in principal.teams


def check_may_decide(principal: ApiPrincipal, row: JobRow) -> None:
    """403 unless the caller leads the job's team or is an admin; says whose team it is."""
    if may_decide(principal, row):
        return
    raise ApiError(
        403,
        f"Permission denied: job {row.id} is team {row.team_name}'s (user {row.user_name}); "
        f"a lead approves only their own teams' jobs, ask a lead of team {row.team_name} "
        "or an admin",
    )
