"""The long chaos runs, for `make chaos` (excluded from `make test`).

The same fleet, faults and invariants as test_chaos_short.py (whose docstring says what
is proven and what is only counted), for TUNEFLEET_CHAOS_SECONDS of faults each
(default 300), with a random seed unless TUNEFLEET_CHAOS_SEED names one; the seed is in
every report, so a failing run's fault choices can be replayed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from tests.chaos.chaos_faults import AGENT_FAULTS, FaultKind
from tests.chaos.chaos_harness import ChaosPlan, env_seconds, env_seed, report, usable_kinds
from tests.chaos.chaos_invariants import check
from tests.chaos.conftest import FleetFactory

SECONDS = env_seconds(300)
# Faults for SECONDS, then up to four minutes to settle, plus start and checks.
pytestmark = [pytest.mark.chaos_long, pytest.mark.timeout(int(SECONDS) + 600)]


def long_plan(kinds: Sequence[FaultKind]) -> ChaosPlan:
    return ChaosPlan(
        seconds=SECONDS,
        initial_jobs=16,
        submit_gap_s=(0.2, 0.8),
        max_jobs=10**6,
        max_live=16,
        fault_gap_s=(1.5, 4.0),
        kinds=kinds,
        settle_timeout_s=240,
    )


def test_long_chaos_processes_and_orchestrator_restarts(chaos_fleet: FleetFactory) -> None:
    """Five loopback agents: kill -9 (agent alone, or with its trainers), SIGSTOP past the
    heartbeat timeout or not (agent alone, or with its trainers), orchestrator kill -9."""
    started = time.monotonic()
    seed = env_seed(None)
    kinds = [kind for kind in FaultKind if kind in AGENT_FAULTS - {FaultKind.CUT_NETWORK}]
    kinds.append(FaultKind.RESTART_ORCHESTRATOR)
    fleet = chaos_fleet(agent_count=5)
    injector = fleet.run(long_plan(kinds), seed)
    findings = check(fleet.evidence(injector))
    message = report(fleet, injector, findings, seed, started)
    assert not findings.violations, message
    assert set(injector.counts()) == set(map(str, kinds)), message


def test_long_chaos_network_partitions(
    chaos_fleet: FleetFactory, netns_unavailable: str | None
) -> None:
    """Four agents, three on their own network namespaces: links cut and restored (for
    less and for more than the heartbeat timeout) among every other fault."""
    if netns_unavailable:
        pytest.skip(f"agents in their own network namespaces: {netns_unavailable}")
    started = time.monotonic()
    seed = env_seed(None)
    single = [kind for kind in FaultKind if kind != FaultKind.KILL_ACTIVE_ORCHESTRATOR]
    kinds = [*single, FaultKind.CUT_NETWORK, FaultKind.CUT_NETWORK]
    fleet = chaos_fleet(agent_count=4, netns_agents=3)
    injector = fleet.run(long_plan(kinds), seed)
    findings = check(fleet.evidence(injector))
    message = report(fleet, injector, findings, seed, started)
    assert not findings.violations, message
    assert set(injector.counts()) == set(map(str, single)), message


@pytest.mark.postgres
def test_long_chaos_on_postgresql_with_a_standby(chaos_fleet: FleetFactory, pg_url: str) -> None:
    """Two orchestrators on PostgreSQL and five loopback agents (given both URLs): every
    agent fault, and kill -9 of the active orchestrator (a standby takes over; the killed
    one comes back as a standby)."""
    started = time.monotonic()
    seed = env_seed(None)
    kinds = usable_kinds("no network cuts on PostgreSQL runs", standbys=True)
    fleet = chaos_fleet(agent_count=5, database_url=pg_url)
    injector = fleet.run(long_plan(kinds), seed)
    findings = check(fleet.evidence(injector))
    message = report(fleet, injector, findings, seed, started)
    assert not findings.violations, message
    assert set(injector.counts()) == set(map(str, kinds)), message
    group = fleet.orchestrator
    assert all(t is not None and t < 10.0 for t in group.takeovers_s), message
