"""Budget periods renew at UTC calendar boundaries; a spent budget warns or blocks."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from tunefleet.budgets import PERIODS, Budget, BudgetPeriod, period_bounds, standing


def _at(*args: int) -> float:
    return dt.datetime(*args, tzinfo=dt.UTC).timestamp()  # type: ignore[misc]


def test_a_day_a_week_and_a_month_renew_at_utc_midnight() -> None:
    now = _at(2026, 11, 28, 15, 30)  # a Saturday
    assert period_bounds("day", now) == (_at(2026, 11, 28), _at(2026, 11, 29))
    assert period_bounds("week", now) == (_at(2026, 11, 23), _at(2026, 11, 30))
    assert period_bounds("month", now) == (_at(2026, 11, 1), _at(2026, 12, 1))
    assert period_bounds("month", _at(2026, 12, 31, 23, 59)) == (_at(2026, 12, 1), _at(2027, 1, 1))


@given(
    st.floats(min_value=1_600_000_000, max_value=2_000_000_000, allow_nan=False),
    st.sampled_from(PERIODS),
)
def test_now_is_inside_its_period_and_the_next_one_starts_at_the_renewal(
    now: float, period: BudgetPeriod
) -> None:
    start, end = period_bounds(period, now)
    assert start <= now < end
    assert period_bounds(period, end)[0] == end


def test_a_spent_budget_meets_its_action_and_says_when_it_renews() -> None:
    now = _at(2026, 11, 28, 15)
    block = Budget("ml", 2.0, "day", "block")
    assert standing(block, 7199, now).verdict == "ok"
    spent = standing(block, 7200, now)
    assert spent.verdict == "block"
    assert spent.message() == (
        "team ml has used 2.00 of its 2 GPU-hour budget per day; it renews at "
        "2026-11-29T00:00:00+00:00"
    )
    assert standing(Budget("ml", 2.0, "week", "warn"), 9000, now).verdict == "warn"
