"""Fixtures of the chaos suites: the seed, the length, network namespaces, and a fleet
that is always taken down (processes ended, namespaces removed), pass or fail."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.chaos.chaos_harness import ChaosFleet
from tests.chaos.chaos_netns import NetnsPool, unavailable_reason
from tests.ha.pg import private_schema, unreachable_reason

FleetFactory = Callable[..., ChaosFleet]


@pytest.fixture(scope="session")
def netns_unavailable() -> str | None:
    """Why agents cannot get their own network namespace here (None: they can)."""
    return unavailable_reason()


@pytest.fixture
def chaos_dir(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """The run's directory; under TUNEFLEET_CHAOS_DIR when set, so it outlives pytest's
    rotation of temporary directories (faults, markers, ledger, every process's log)."""
    keep = os.environ.get("TUNEFLEET_CHAOS_DIR", "").strip()
    if not keep:
        return tmp_path / "run"
    return Path(keep) / f"{request.node.name}-{time.strftime('%Y%m%d-%H%M%S')}"


@pytest.fixture
def chaos_fleet(chaos_dir: Path) -> Iterator[FleetFactory]:
    fleets: list[ChaosFleet] = []
    pools: list[NetnsPool] = []

    def make(
        agent_count: int,
        netns_agents: int = 0,
        heartbeat_timeout_s: float = 4.0,
        database_url: str | None = None,
    ) -> ChaosFleet:
        links = []
        if netns_agents:
            pool = NetnsPool(netns_agents)
            pools.append(pool)
            links = pool.create()
        fleet = ChaosFleet(chaos_dir, agent_count, links, heartbeat_timeout_s, database_url)
        fleets.append(fleet)
        return fleet.start()

    try:
        yield make
    finally:
        try:
            for fleet in fleets:
                fleet.stop()
        finally:
            for pool in pools:
                pool.close()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A private schema on the shared PostgreSQL server, or a skip saying why not."""
    reason = unreachable_reason()
    if reason is not None:
        pytest.skip(reason)
    with private_schema("tf_chaos") as url:
        yield url
