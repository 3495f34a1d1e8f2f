"""Teams' budgets at submit time: where a team stands now, and the refusal or warning a
spent budget brings (tunefleet/budgets.py decides; this reads storage and answers)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tunefleet.actors.records import iso
from tunefleet.audit import AuditKind
from tunefleet.budgets import Budget, BudgetStanding, standing
from tunefleet.http import keys
from tunefleet.http.errors import ApiError
from tunefleet.http.route_table import principal_of
from tunefleet.storage.rows import TeamBudgetRow
from tunefleet.storage.store import Repos, Store
from tunefleet.usage import day_pieces
from tunefleet.webhooks.events import Scope

BUDGET_WARNING = "budget.warning"
BUDGET_EXCEEDED = "budget.exceeded"


def budget_of(row: TeamBudgetRow) -> Budget:
    return Budget(row.team_name, row.gpu_hours, row.period, row.action)  # type: ignore[arg-type]


async def team_standing(store: Store, row: TeamBudgetRow, now: float) -> BudgetStanding:
    """The team's usage in its budget's current period, up to now."""
    budget = budget_of(row)
    blank = standing(budget, 0, now)
    spans = await store.usage.attempt_spans(blank.period_start, now)
    gpu_ms = sum(
        ms
        for span in spans
        if span.team == row.team_name
        for _, ms in day_pieces(span, now, blank.period_start, now)
    )
    return standing(budget, gpu_ms / 1000, now)


def standing_view(found: BudgetStanding) -> dict[str, Any]:
    return {
        "team": found.budget.team,
        "gpu_hours": found.budget.gpu_hours,
        "period": found.budget.period,
        "action": found.budget.action,
        "used_gpu_hours": round(found.used_gpu_hours, 6),
        "period_start": iso(found.period_start),
        "renews_at": iso(found.renews_at),
        "spent": found.spent,
    }


async def check_budget(request: web.Request, team: str) -> BudgetStanding | None:
    """Before a submit to `team`: 403 when its `block` budget is spent (nothing stored);
    the standing when its `warn` budget is (the caller says so); else None."""
    store = request.app[keys.STORE]
    row = await store.usage.budget(team)
    if row is None:
        return None
    found = await team_standing(store, row, request.app[keys.CLOCK].time())
    if found.verdict == "block":
        await _note_exceeded(request, team, found)
        raise ApiError(
            403,
            f"GPU-hour budget spent: {found.message()}; submit then, or ask an admin to "
            f"raise it (tunefleet teams set-budget {team})",
        )
    return found if found.verdict == "warn" else None


async def note_budget_warning(
    request: web.Request, job_id: str, found: BudgetStanding, actor: str
) -> None:
    """A job let through past its team's `warn` budget: on its timeline and in the audit,
    and a ``budget.warning`` webhook event committed with the timeline entry."""
    detail = standing_view(found)
    store = request.app[keys.STORE]
    outbox = request.app.get(keys.WEBHOOKS)
    message = found.message()

    def note(repos: Repos) -> None:
        repos.jobs.append_event(job_id, BUDGET_WARNING, detail={"message": message})
        if outbox is not None:
            outbox.stage_job(repos, BUDGET_WARNING, job_id, detail={**detail, "message": message})

    await store.atomically(note)
    await request.app[keys.AUDIT].record(
        AuditKind.BUDGET_WARNING, actor=actor, target=job_id, **detail
    )


async def _note_exceeded(request: web.Request, team: str, found: BudgetStanding) -> None:
    """A submit refused by a spent ``block`` budget: the ``budget.exceeded`` webhook event
    (nothing else is stored for a refused submit)."""
    outbox = request.app.get(keys.WEBHOOKS)
    if outbox is None or not outbox.active:
        return
    user = principal_of(request).user or None
    data = {**standing_view(found), "message": found.message(), "user": user}
    scope = Scope(user_name=user, team_name=team)
    await request.app[keys.STORE].atomically(
        lambda repos: outbox.stage_plain(repos, BUDGET_EXCEEDED, data, scope)
    )
