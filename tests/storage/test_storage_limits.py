"""Concurrency limits kept durably (store_limits.py), on SQLite, PostgreSQL and the
in-memory twin alike."""

from __future__ import annotations

import pytest

from tunefleet.actors.fair_share import TeamQuota
from tunefleet.actors.tenancy_limits import ConcurrencyLimits, TeamLimits
from tunefleet.storage.errors import Missing
from tunefleet.storage.memory import memory_store
from tunefleet.storage.store import Store


@pytest.fixture(params=["database", "memory"])
def either(request: pytest.FixtureRequest, store: Store) -> Store:
    return store if request.param == "database" else memory_store()


async def test_a_new_database_is_unlimited(either: Store) -> None:
    limits = await either.limits.limits()
    assert limits == ConcurrencyLimits()
    assert limits.unlimited


async def test_fleet_and_team_limits_are_kept_and_zero_is_unlimited(either: Store) -> None:
    await either.users.create_team("nlp")
    await either.limits.set_fleet_limits(10, 3)
    await either.limits.set_team_limits("nlp", 4, 8)
    kept = await either.limits.limits()
    assert kept == ConcurrencyLimits(10, 3, {"nlp": TeamLimits(4, 8)})
    # Changed again: the one settings row is replaced, 0 reads back as unlimited.
    await either.limits.set_fleet_limits(0, 2)
    await either.limits.set_team_limits("nlp", None, 0)
    assert await either.limits.limits() == ConcurrencyLimits(None, 2)


async def test_an_unknown_team_is_refused_and_changes_nothing(either: Store) -> None:
    with pytest.raises(Missing, match="unknown team: ghost"):
        await either.limits.set_team_limits("ghost", 1, 1)
    assert await either.limits.limits() == ConcurrencyLimits()


async def test_team_quotas_are_kept_replaced_and_cleared(either: Store) -> None:
    """Issue 25: a quota per team (in all and per flavor glob), weight, borrowing limit;
    setting nothing at all clears it."""
    await either.users.create_team("nlp")
    await either.users.create_team("vision")
    assert await either.limits.quotas() == {}
    quota = TeamQuota(8, {"*H100*": 4, "*A100*": 8}, 2.0, 4)
    await either.limits.set_quota("nlp", quota)
    await either.limits.set_quota("vision", TeamQuota(weight=0.5))
    kept = await either.limits.quotas()
    assert kept == {"nlp": quota, "vision": TeamQuota(weight=0.5)}
    assert list(kept["nlp"].flavors) == ["*A100*", "*H100*"]  # sorted: order decides flavor
    await either.limits.set_quota("nlp", TeamQuota(gpus=2))
    assert (await either.limits.quotas())["nlp"] == TeamQuota(gpus=2)
    await either.limits.set_quota("nlp", TeamQuota())
    assert await either.limits.quotas() == {"vision": TeamQuota(weight=0.5)}


async def test_a_quota_for_an_unknown_team_is_refused(either: Store) -> None:
    with pytest.raises(Missing, match="unknown team: ghost"):
        await either.limits.set_quota("ghost", TeamQuota(gpus=1))
    assert await either.limits.quotas() == {}
