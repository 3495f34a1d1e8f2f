"""Short chaos runs, part of `make test` (about a minute together).

Real `python -m tunefleet server` and `python -m tunefleet worker` processes; jobs of the
example trainer (through tests/chaos/chaos_trainer.py, which brackets each run with
start and end markers); faults from a seeded RNG (TUNEFLEET_CHAOS_SEED replays the same
choices; the default seed is fixed). After the faults, everything is healed and the
fleet is given time to finish every job, then the invariants of
tests/chaos/chaos_invariants.py are checked from the job records (GET /api/queue and
each job's attempt_history and timeline) and from the trainers' own files:

- every accepted job is completed exactly once (one completed attempt, one completed
  timeline entry, one ledger line for that attempt, whose trainer exited 0 before the
  completion was recorded), or failed after its last allowed attempt with the reason
  recorded; none is left pending once the healed fleet had time to run it;
- the orchestrator never had a job on two workers at once (attempt k ended before
  attempt k+1 was dispatched) and never gave a worker two jobs at once;
- every trainer that ran belongs to a recorded attempt on the recorded worker, started
  after its dispatch, and one agent process never ran two trainers at once.

What cannot be proven, and is counted rather than failed: a lost attempt's process may
run on after the orchestrator gave up on it (a paused or partitioned agent's trainer, a
killed agent's orphan), so the same job's work can overlap on two machines for a while
and even finish twice (a ledger line for the lost attempt). The orchestrator accepts
exactly one completion; execution is at least once. See docs/chaos.md.
"""

from __future__ import annotations

import time

import pytest

from tests.chaos.chaos_harness import (
    SHORT_DEFAULT_SEED,
    ChaosPlan,
    env_seed,
    report,
    usable_kinds,
)
from tests.chaos.chaos_invariants import check
from tests.chaos.conftest import FleetFactory

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]


def test_short_chaos_run(chaos_fleet: FleetFactory, netns_unavailable: str | None) -> None:
    """Every fault kind at least once in about half a minute, on four agents (two of them
    on their own network namespace where that is permitted)."""
    started = time.monotonic()
    seed = env_seed(SHORT_DEFAULT_SEED)
    kinds = usable_kinds(netns_unavailable)
    fleet = chaos_fleet(agent_count=4, netns_agents=0 if netns_unavailable else 2)
    plan = ChaosPlan(
        seconds=30,
        initial_jobs=12,
        submit_gap_s=(0.3, 0.9),
        max_jobs=45,
        fault_gap_s=(2.0, 3.0),
        kinds=kinds,
        settle_timeout_s=60,
    )
    injector = fleet.run(plan, seed)
    findings = check(fleet.evidence(injector))
    message = report(fleet, injector, findings, seed, started)
    assert not findings.violations, message
    assert set(injector.counts()) == set(map(str, kinds)), message
    assert findings.stats["jobs_completed"] > 0, message
