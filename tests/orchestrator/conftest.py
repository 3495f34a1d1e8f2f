"""Fixtures: a Fleet on a settling fake clock over a SQLite file in tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from orchestrator_testkit import FleetHarness, SettlingClock

from tunefleet.actors.context import FleetSettings


@pytest.fixture
def clock() -> SettlingClock:
    return SettlingClock()


@pytest.fixture
def settings() -> FleetSettings:
    """Production defaults, without the local runner (tests that need it add it)."""
    return FleetSettings(local_runner=False)


@pytest.fixture
async def harness(
    tmp_path: Path, clock: SettlingClock, settings: FleetSettings
) -> AsyncIterator[FleetHarness]:
    h = await FleetHarness.open(tmp_path, clock, settings)
    try:
        yield h
    finally:
        await h.close_all()
