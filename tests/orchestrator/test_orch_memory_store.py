"""The orchestrator tests' fleet runs on the in-memory store; a restart needs a file."""

from __future__ import annotations

import pytest
from orchestrator_testkit import FleetHarness

from tunefleet.storage.memory_tables import MemoryDatabase


async def test_the_fleet_keeps_its_rows_in_memory(harness: FleetHarness) -> None:
    assert isinstance(harness.db, MemoryDatabase)
    job_id = await harness.submit()
    assert await harness.job_state(job_id) == "pending"
    assert [e.kind for e in await harness.store.list_audit()] == ["job.submitted"]


async def test_a_fleet_on_the_memory_store_cannot_restart(harness: FleetHarness) -> None:
    with pytest.raises(TypeError, match="restart needs the SQLite store"):
        await harness.restart()
