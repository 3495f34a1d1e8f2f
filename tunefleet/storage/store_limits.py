"""Concurrency limits, stored (issue 24): the fleet's `max_concurrent` and
`user_max_concurrent` in one settings row, each team's `max_jobs` and `max_gpus` on
the team. None is unlimited; 0 is stored as None, SimpleTuner's other spelling of it."""

from __future__ import annotations

import json
from functools import partial

from tunefleet.actors.fair_share import TeamQuota
from tunefleet.actors.tenancy_limits import ConcurrencyLimits, TeamLimits
from tunefleet.storage.models import ConcurrencySetting, Team, TeamQuotaRow
from tunefleet.storage.store_base import Connector, Now
from tunefleet.storage.store_users import unknown_team

_SETTING_ID = 1


class LimitRepo:
    def __init__(self, now: Now) -> None:
        self._now = now

    def limits(self) -> ConcurrencyLimits:
        row = ConcurrencySetting.get_or_none(ConcurrencySetting.id == _SETTING_ID)
        teams = {
            t.name: TeamLimits(t.max_jobs, t.max_gpus)
            for t in Team.select(Team.name, Team.max_jobs, Team.max_gpus)
            .where(Team.max_jobs.is_null(False) | Team.max_gpus.is_null(False))
            .order_by(Team.id)
        }
        if row is None:
            return ConcurrencyLimits(teams=teams)
        return ConcurrencyLimits(row.max_concurrent, row.user_max_concurrent, teams)

    def set_fleet_limits(
        self, max_concurrent: int | None, user_max_concurrent: int | None
    ) -> ConcurrencyLimits:
        values = {
            "max_concurrent": max_concurrent or None,
            "user_max_concurrent": user_max_concurrent or None,
            "updated_at": self._now(),
        }
        (
            ConcurrencySetting.insert(id=_SETTING_ID, **values)
            .on_conflict(conflict_target=[ConcurrencySetting.id], update=values)
            .execute()
        )
        return self.limits()

    def set_team_limits(
        self, team: str, max_jobs: int | None, max_gpus: int | None
    ) -> ConcurrencyLimits:
        changed = (
            Team.update(max_jobs=max_jobs or None, max_gpus=max_gpus or None)
            .where(Team.name == team)
            .execute()
        )
        if not changed:
            raise unknown_team(team)
        return self.limits()

    def quotas(self) -> dict[str, TeamQuota]:
        """Every team's quota (issue 25); a team without one is not listed."""
        return {
            row.team_name: TeamQuota(
                row.gpus, json.loads(row.flavors), row.weight, row.borrow_limit
            )
            for row in TeamQuotaRow.select().order_by(TeamQuotaRow.team_name)
        }

    def set_quota(self, team: str, quota: TeamQuota) -> dict[str, TeamQuota]:
        """Set (or replace) ``team``'s quota; a default one (nothing set) clears it."""
        if not Team.select().where(Team.name == team).exists():
            raise unknown_team(team)
        TeamQuotaRow.delete().where(TeamQuotaRow.team_name == team).execute()
        if not quota.is_default:
            TeamQuotaRow.insert(
                team_name=team,
                gpus=quota.gpus,
                flavors=json.dumps(dict(quota.flavors)),
                weight=quota.weight,
                borrow_limit=quota.borrow_limit,
                updated_at=self._now(),
            ).execute()
        return self.quotas()


class LimitRecords:
    """The limits, awaited from the event loop (one DB read or write each)."""

    def __init__(self, db: Connector, repo: LimitRepo) -> None:
        self.db = db
        self.repo = repo

    async def limits(self) -> ConcurrencyLimits:
        return await self.db.read(self.repo.limits)

    async def set_fleet_limits(
        self, max_concurrent: int | None, user_max_concurrent: int | None
    ) -> ConcurrencyLimits:
        return await self.db.write(
            partial(self.repo.set_fleet_limits, max_concurrent, user_max_concurrent)
        )

    async def set_team_limits(
        self, team: str, max_jobs: int | None, max_gpus: int | None
    ) -> ConcurrencyLimits:
        return await self.db.write(partial(self.repo.set_team_limits, team, max_jobs, max_gpus))

    async def quotas(self) -> dict[str, TeamQuota]:
        return await self.db.read(self.repo.quotas)

    async def set_quota(self, team: str, quota: TeamQuota) -> dict[str, TeamQuota]:
        return await self.db.write(partial(self.repo.set_quota, team, quota))
