"""Fixtures: a Fleet on a settling fake clock over the in-memory store; the modules that
restart the orchestrator override ``storage`` to keep it in a SQLite file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from orchestrator_testkit import FleetHarness, SettlingClock, Storage

from tunefleet.actors.context import FleetSettings


@pytest.fixture
def clock() -> SettlingClock:
    return SettlingClock()


@pytest.fixture
def settings() -> FleetSettings:
    """Production defaults, without the local runner (tests that need it add it)."""
    return FleetSettings(local_runner=False)


@pytest.fixture
def storage() -> Storage:
    """The actors need a store, not a database: the in-memory one, held to the SQLite
    store's contract by tests/storage/test_storage_contract.py."""
    return "memory"


@pytest.fixture
async def harness(
    tmp_path: Path, clock: SettlingClock, settings: FleetSettings, storage: Storage
) -> AsyncIterator[FleetHarness]:
    h = await FleetHarness.open(tmp_path, clock, settings, storage=storage)
    try:
        yield h
    finally:
        await h.close_all()
