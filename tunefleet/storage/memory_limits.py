"""In-memory concurrency limits: store_limits' repository over memory_tables, keeping
its contract (same arguments, answers and errors; the contract test checks)."""

from __future__ import annotations

from tunefleet.actors.fair_share import TeamQuota
from tunefleet.actors.tenancy_limits import ConcurrencyLimits, TeamLimits
from tunefleet.storage.memory_tables import Tables
from tunefleet.storage.store_base import Now
from tunefleet.storage.store_limits import LimitRepo
from tunefleet.storage.store_users import unknown_team

_SETTING_ID = 1


class MemoryLimitRepo(LimitRepo):
    def __init__(self, now: Now, tables: Tables) -> None:
        self._now = now
        self._t = tables

    def limits(self) -> ConcurrencyLimits:
        teams = {
            team.name: TeamLimits(*self._t.team_limits[team.id])
            for team in self._t.teams.values()
            if team.id in self._t.team_limits
        }
        fleet = self._t.concurrency.get(_SETTING_ID, (None, None))
        return ConcurrencyLimits(fleet[0], fleet[1], teams)

    def set_fleet_limits(
        self, max_concurrent: int | None, user_max_concurrent: int | None
    ) -> ConcurrencyLimits:
        self._t.concurrency[_SETTING_ID] = (max_concurrent or None, user_max_concurrent or None)
        return self.limits()

    def set_team_limits(
        self, team: str, max_jobs: int | None, max_gpus: int | None
    ) -> ConcurrencyLimits:
        row = next((t for t in self._t.teams.values() if t.name == team), None)
        if row is None:
            raise unknown_team(team)
        if max_jobs or max_gpus:
            self._t.team_limits[row.id] = (max_jobs or None, max_gpus or None)
        else:
            self._t.team_limits.pop(row.id, None)
        return self.limits()

    def quotas(self) -> dict[str, TeamQuota]:
        return dict(sorted(self._t.team_quotas.items()))

    def set_quota(self, team: str, quota: TeamQuota) -> dict[str, TeamQuota]:
        if not any(t.name == team for t in self._t.teams.values()):
            raise unknown_team(team)
        self._t.team_quotas.pop(team, None)
        if not quota.is_default:
            self._t.team_quotas[team] = quota
        return self.quotas()
