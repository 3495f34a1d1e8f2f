"""Usage and budgets: the attempts accounting reads, and teams' GPU-hour budgets.

Usage is never stored: it is read from attempts (their dispatch and end times) and their
jobs (user, team, gpu_count) every time, so it cannot drift from them (tunefleet/usage.py
does the arithmetic). Synchronous: these run on the DB thread.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from tunefleet.storage.models import Job, JobAttempt, TeamBudget
from tunefleet.storage.rows import TeamBudgetRow, first_of, rows_of
from tunefleet.storage.store_base import Connector, Now
from tunefleet.usage import AttemptSpan


class UsageRepo:
    def __init__(self, now: Now) -> None:
        self._now = now

    def attempt_spans(self, since: float | None, until: float | None) -> list[AttemptSpan]:
        """Every attempt that held its GPUs at some time in [since, until), with its job's
        user, team and gpu_count; a running one (no end) is in every window after its
        dispatch."""
        query: Any = JobAttempt.select(
            JobAttempt.job,
            JobAttempt.number,
            JobAttempt.dispatched_at,
            JobAttempt.ended_at,
            Job.user_name,
            Job.team_name,
            Job.gpu_count,
        ).join(Job, on=(JobAttempt.job == Job.id))
        if until is not None:
            query = query.where(JobAttempt.dispatched_at < until)
        if since is not None:
            query = query.where(JobAttempt.ended_at.is_null() | (JobAttempt.ended_at > since))
        query = query.order_by(JobAttempt.dispatched_at, JobAttempt.id)
        return [
            AttemptSpan(job, number, user, team, int(gpus), float(start), _float(end))
            for job, number, start, end, user, team, gpus in query.tuples()
        ]

    def set_budget(self, team: str, gpu_hours: float, period: str, action: str) -> TeamBudgetRow:
        """Set (or replace) `team`'s budget; the caller checked that the team exists."""
        values = {
            "gpu_hours": gpu_hours,
            "period": period,
            "action": action,
            "updated_at": self._now(),
        }
        changed = TeamBudget.update(**values).where(TeamBudget.team_name == team).execute()
        if not changed:
            TeamBudget.insert(team_name=team, **values).execute()
        row = self.budget(team)
        assert row is not None
        return row

    def clear_budget(self, team: str) -> bool:
        return bool(TeamBudget.delete().where(TeamBudget.team_name == team).execute())

    def budget(self, team: str) -> TeamBudgetRow | None:
        return first_of(TeamBudgetRow, TeamBudget.select().where(TeamBudget.team_name == team))

    def budgets(self) -> list[TeamBudgetRow]:
        return rows_of(TeamBudgetRow, TeamBudget.select().order_by(TeamBudget.team_name))


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


class UsageRecords:
    """Usage and budgets, awaited from the event loop. Every submit asks its team's budget
    and budgets change only here, so they are read once and kept until a write (no read
    on the database thread per submit)."""

    def __init__(self, db: Connector, repo: UsageRepo) -> None:
        self.db = db
        self.repo = repo
        self._budgets: dict[str, TeamBudgetRow] | None = None
        # Bumped by each write: a read that overlapped one does not keep what it read.
        self._writes = 0

    async def attempt_spans(self, since: float | None, until: float | None) -> list[AttemptSpan]:
        return await self.db.read(partial(self.repo.attempt_spans, since, until))

    async def set_budget(
        self, team: str, gpu_hours: float, period: str, action: str
    ) -> TeamBudgetRow:
        self._budgets = None
        try:
            return await self.db.write(
                partial(self.repo.set_budget, team, gpu_hours, period, action)
            )
        finally:
            self._budgets = None
            self._writes += 1

    async def clear_budget(self, team: str) -> bool:
        self._budgets = None
        try:
            return await self.db.write(partial(self.repo.clear_budget, team))
        finally:
            self._budgets = None
            self._writes += 1

    async def budget(self, team: str) -> TeamBudgetRow | None:
        if self._budgets is not None:
            return self._budgets.get(team)
        writes = self._writes
        budgets = {row.team_name: row for row in await self.db.read(self.repo.budgets)}
        if writes == self._writes:
            self._budgets = budgets
        return budgets.get(team)

    async def budgets(self) -> list[TeamBudgetRow]:
        return await self.db.read(self.repo.budgets)
