"""The issue's proof: PostgreSQL, two orchestrator processes and real agents running the
example trainer (through tests/chaos/chaos_trainer.py). The active orchestrator is
killed with -9 mid-run; a standby is active within 10 s; the agents (given both URLs)
move to it with their running jobs; every job completes exactly once, which the chaos
invariant checker proves from the records and the trainers' own files; the killed
process is started again and stands by."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.chaos.chaos_faults import FaultKind
from tests.chaos.chaos_ha import OrchestratorGroup
from tests.chaos.chaos_harness import ChaosFleet, ChaosPlan, env_seed, report
from tests.chaos.chaos_invariants import check

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.timeout(240)]

SEED = 20261126


def test_kill_9_of_the_active_orchestrator_mid_run_loses_and_repeats_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    started = time.monotonic()
    seed = env_seed(SEED)
    fleet = ChaosFleet(tmp_path / "run", agent_count=3, database_url=pg_url)
    try:
        fleet.start()
        plan = ChaosPlan(
            seconds=14,
            initial_jobs=6,
            submit_gap_s=(0.6, 1.2),
            max_jobs=16,
            fault_gap_s=(4.0, 6.0),
            kinds=[FaultKind.KILL_ACTIVE_ORCHESTRATOR],
            settle_timeout_s=90,
            steps=(60, 120),
            retries=(2,),
        )
        injector = fleet.run(plan, seed)
        findings = check(fleet.evidence(injector))
        message = report(fleet, injector, findings, seed, started)
        group = fleet.orchestrator
        assert isinstance(group, OrchestratorGroup)
        assert not findings.violations, message
        kills = [f for f in injector.faults if f.kind == FaultKind.KILL_ACTIVE_ORCHESTRATOR]
        assert kills, message
        assert any(kill.detail["jobs_running"] for kill in kills), message  # mid-run
        assert group.takeovers_s and all(t < 10.0 for t in group.takeovers_s), message
        # Nothing was lost: every accepted job completed (exactly once: the checker).
        assert findings.stats["jobs_completed"] == len(fleet.accepted), message
        # The killed processes came back as standbys of the one active orchestrator.
        roles = sorted(str(group.role(node)) for node in group.nodes)
        assert roles == ["active", "standby"], message
        assert group.exits == [], message
    finally:
        fleet.stop()
