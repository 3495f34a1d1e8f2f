"""End to end: a real agent on fake GPUs whose fake NVML reports an Xid (through the
fault file TUNEFLEET_FAKE_GPU_FAULTS, flipped while it runs) becomes unhealthy from its
next heartbeat and is quarantined (it takes no new job), the jobs run on the healthy
worker instead; only an admin releases it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Agent, Orchestrator, wait_until, write_tiny_config

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[Orchestrator]:
    configs = tmp_path / "configs"
    write_tiny_config(configs, "quick", max_train_steps=5, step_seconds=0.02)
    # Silent workers go offline after 3 s in the harness; these beat every 0.5 s.
    orch = Orchestrator(tmp_path / "data", configs).start()
    yield orch
    orch.stop()


def fake_gpu_agent(orch: Orchestrator, tmp_path: Path, name: str) -> tuple[Agent, str, Path]:
    created = orch.create_worker(name, "persistent")
    faults = tmp_path / f"faults-{name}.json"
    agent = Agent(
        orch.url,
        created["token"],
        tmp_path / f"work-{name}",
        name,
        persistent=True,
        extra_env={"TUNEFLEET_FAKE_GPUS": "2", "TUNEFLEET_FAKE_GPU_FAULTS": str(faults)},
    ).start()
    return agent, created["worker_id"], faults


def test_an_xid_quarantines_the_worker_and_jobs_go_elsewhere(
    orchestrator: Orchestrator, tmp_path: Path
) -> None:
    sick, sick_id, faults = fake_gpu_agent(orchestrator, tmp_path, "sick")
    well, well_id, _ = fake_gpu_agent(orchestrator, tmp_path, "well")
    try:
        for worker_id in (sick_id, well_id):
            orchestrator.wait_worker(worker_id, "idle")
        wait_until(
            lambda: orchestrator.worker(sick_id)["health"] == "healthy",
            what="the first health reading",
        )
        faults.write_text(json.dumps({"1": {"xids": [79]}}))
        wait_until(
            lambda: orchestrator.worker(sick_id)["health"] == "unhealthy",
            what="the Xid to reach the orchestrator",
        )
        view = orchestrator.worker(sick_id)
        assert view["health_reason"] == "Xid 79 on GPU 1"
        assert view["gpu_health"]["gpus"][1]["xids"] == [79]
        assert view["status"] == "idle" and view["connected"]  # held, not gone
        assert view["quarantined"]
        assert view["quarantine_reason"] == "GPU health: Xid 79 on GPU 1"
        assert "gpu xid event" in sick.log()

        jobs = [orchestrator.submit(config_name="quick", target="worker") for _ in range(4)]
        for submitted in jobs:
            done = orchestrator.wait_job(submitted["job_id"], {"completed", "failed"})
            assert done["status"] == "completed", done
            assert [a["worker_id"] for a in done["attempt_history"]] == [well_id]
        audit = orchestrator.request(
            "GET", f"/api/audit?kind=worker.health&target={sick_id}&limit=10"
        )
        assert [e["detail"]["health"] for e in audit["events"]] == ["unhealthy", "healthy"]
        quarantined = orchestrator.request(
            "GET", f"/api/audit?kind=worker.quarantined&target={sick_id}&limit=10"
        )
        assert [e["actor"] for e in quarantined["events"]] == ["orchestrator"]

        # Only an admin lifts it; the reading (an Xid stays in it until the agent
        # restarts) does not put it back while it stays unhealthy: the admin's word.
        orchestrator.request("POST", f"/api/admin/workers/{sick_id}/release")
        job = orchestrator.submit(config_name="quick", target="worker")
        assert orchestrator.wait_job(job["job_id"], {"completed", "failed"})["status"] == (
            "completed"
        )
        assert not orchestrator.worker(sick_id)["quarantined"]
    finally:
        sick.stop()
        well.stop()
