"""Team GPU-hour budgets: pure functions over plain values, no storage nor HTTP.

A budget covers one UTC calendar period, renewing at its start: a day at midnight, a week
on Monday at midnight, a month on the 1st at midnight. A submit to a team whose usage in
the current period has reached its budget meets the budget's action: `warn` lets it
through and says so, `block` refuses it. Usage counts every attempt's GPU-seconds
(tunefleet/usage.py), running ones up to now.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

BudgetPeriod = Literal["day", "week", "month"]
BudgetAction = Literal["warn", "block"]
PERIODS: tuple[BudgetPeriod, ...] = ("day", "week", "month")
ACTIONS: tuple[BudgetAction, ...] = ("warn", "block")


@dataclass(frozen=True, slots=True)
class Budget:
    team: str
    gpu_hours: float
    period: BudgetPeriod
    action: BudgetAction


@dataclass(frozen=True, slots=True)
class BudgetStanding:
    """Where a team stands against its budget now."""

    budget: Budget
    used_gpu_hours: float
    period_start: float
    renews_at: float

    @property
    def spent(self) -> bool:
        return self.used_gpu_hours >= self.budget.gpu_hours

    @property
    def verdict(self) -> Literal["ok", "warn", "block"]:
        return self.budget.action if self.spent else "ok"

    def message(self) -> str:
        renews = dt.datetime.fromtimestamp(self.renews_at, dt.UTC).isoformat()
        return (
            f"team {self.budget.team} has used {self.used_gpu_hours:.2f} of its "
            f"{self.budget.gpu_hours:g} GPU-hour budget per {self.budget.period}; it renews "
            f"at {renews}"
        )


def period_bounds(period: BudgetPeriod, now: float) -> tuple[float, float]:
    """(start, end) in epoch seconds of the UTC `period` that holds `now`; end = renewal."""
    today = dt.datetime.fromtimestamp(now, dt.UTC).date()
    if period == "day":
        start = today
        end = today + dt.timedelta(days=1)
    elif period == "week":
        start = today - dt.timedelta(days=today.weekday())
        end = start + dt.timedelta(days=7)
    else:
        start = today.replace(day=1)
        end = (start + dt.timedelta(days=32)).replace(day=1)
    return _epoch(start), _epoch(end)


def _epoch(day: dt.date) -> float:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()


def standing(budget: Budget, used_gpu_seconds: float, now: float) -> BudgetStanding:
    start, end = period_bounds(budget.period, now)
    return BudgetStanding(budget, used_gpu_seconds / 3600, start, end)
