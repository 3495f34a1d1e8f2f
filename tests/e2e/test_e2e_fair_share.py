"""End to end, a contended fleet under team quotas (issue 25): a real orchestrator
process started with --min-runtime-before-preempt 0, and simulated four-GPU workers
speaking the wire protocol (as in test_e2e_tenancy_day). Team nlp borrows the whole
fleet; team vision, below its quota, submits; the orchestrator decides a reclaim of one
of nlp's borrowing jobs, audits it, counts it and preempts it (a job_cancel with
preempt, which these simulated agents ignore, as an agent busy writing its checkpoint
would for a while): the victim then ends as its trainer would within the grace, and its
worker goes to vision's job (within quota) before nlp's waiting ones (borrowing)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Orchestrator, wait_until, write_tiny_config
from tests.e2e.test_e2e_tenancy_day import SimulatedWorkers

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[Orchestrator]:
    configs = tmp_path / "configs"
    write_tiny_config(configs, "quick", max_train_steps=5, step_seconds=0.01)
    orch = Orchestrator(
        tmp_path / "data", configs, extra_args=["--min-runtime-before-preempt", "0"]
    ).start()
    yield orch
    orch.stop()


def test_a_team_below_its_quota_reclaims_what_another_borrows(orchestrator: Orchestrator) -> None:
    orch = orchestrator
    for team in ("nlp", "vision"):
        orch.request("POST", "/api/admin/teams", {"name": team})
    tokens = {}
    for name, team in (("alice", "nlp"), ("carol", "vision")):
        orch.request(
            "POST", "/api/admin/users", {"name": name, "role": "researcher", "teams": [team]}
        )
        body = {"name": f"{name}-laptop", "user": name}
        tokens[name] = str(orch.request("POST", "/api/admin/tokens", body)["token"])
    answer = orch.request("POST", "/api/admin/teams/nlp/quota", {"gpus": 8})
    assert any("oversubscribed" in w for w in answer["warnings"])  # no worker yet
    orch.request("POST", "/api/admin/teams/vision/quota", {"flavors": {"*A100*": 8}, "weight": 2})

    def submit(user: str) -> str:
        body = {"config_name": "quick", "target": "worker", "gpu_count": 4}
        job = orch.request("POST", "/api/queue/submit", body, token=tokens[user])
        return str(job["job_id"])

    created = {name: orch.create_worker(name) for name in ("gpu-a", "gpu-b", "gpu-c", "gpu-d")}
    workers = SimulatedWorkers(orch.url, {n: c["token"] for n, c in created.items()}).start()
    try:
        for worker in created.values():
            orch.wait_worker(worker["worker_id"], "idle")
        nlp = [submit("alice") for _ in range(5)]  # four run (two borrow), one waits
        for job_id in nlp[:4]:
            orch.wait_job(job_id, {"running"}, timeout_s=15)
        share = orch.request("GET", "/api/queue/stats")["fair_share"]["nlp"]
        assert (share["used_gpus"], share["borrowed_gpus"]) == (16, 8)
        assert orch.job(nlp[4])["wait_reason"] == (
            "team nlp uses 16 of its 8 GPUs (quota); no idle GPUs to borrow"
        )

        theirs = submit("carol")

        def reclaims() -> list[dict[str, Any]]:
            events = orch.request("GET", "/api/audit?kind=queue.reclaim")
            return list(events["events"])

        wait_until(lambda: reclaims(), 15, 0.1, "a reclaim decided and audited")
        (decision,) = reclaims()
        victim = decision["target"]
        assert victim in nlp[2:4]  # one of the two borrowing jobs: the youngest
        assert decision["detail"]["for_job"] == theirs
        with urllib.request.urlopen(f"{orch.url}/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
        assert 'tunefleet_reclaims_total{team="nlp"} 1.0' in metrics

        workers.release(victim)  # the preemption mechanism's stop, simulated by its end
        orch.wait_job(theirs, {"running"}, timeout_s=15)
        assert workers.ran[theirs] == workers.ran[victim]
        assert orch.job(nlp[4])["status"] == "pending"  # borrowing: after vision's
        shares = orch.request("GET", "/api/queue/stats")["fair_share"]
        assert shares["vision"]["used_gpus"] == 4 and shares["nlp"]["borrowed_gpus"] == 4
        assert shares["nlp"]["standing"] > 0
        workers.release(*nlp, theirs)
        assert workers.errors == []
    finally:
        workers.stop()
