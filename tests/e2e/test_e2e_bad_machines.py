"""End to end (issue 26): a real orchestrator and real agents, one of them on a machine
whose trainer dies with a CUDA error. That worker is quarantined after 3 failures,
every job still completes elsewhere, and a poison config fails after two attempts on
two workers, in seconds."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Agent, Orchestrator, wait_until, write_tiny_config

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# The example trainer, unless this machine's GPU is "broken" (an env var only the broken
# agent has): then it dies the way a trainer on a failing GPU does.
TRAINER = """\
import os, sys
if os.environ.get("E2E_BROKEN_GPU"):
    print("Traceback (most recent call last):", file=sys.stderr)
    print("RuntimeError: CUDA error: an illegal memory access was encountered", file=sys.stderr)
    sys.exit(1)
from tunefleet.examples.tiny_trainer import main
sys.exit(main())
"""


@pytest.fixture
def trainer(tmp_path: Path) -> Path:
    path = tmp_path / "gpu_trainer.py"
    path.write_text(TRAINER)
    return path


@pytest.fixture
def orchestrator(tmp_path: Path, trainer: Path) -> Iterator[Orchestrator]:
    configs = tmp_path / "configs"
    command = [sys.executable, str(trainer)]
    write_tiny_config(configs, "quick", tunefleet_command=command, max_train_steps=5)
    # Fails the same way wherever it runs: the job's fault.
    write_tiny_config(configs, "poison", tunefleet_command=command, fail_at_step=2)
    orch = Orchestrator(tmp_path / "data", configs).start()
    yield orch
    orch.stop()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.stop()


def start(
    orch: Orchestrator, agents: list[Agent], tmp_path: Path, trainer: Path, name: str, **env: str
) -> str:
    created = orch.create_worker(name, "persistent")
    agent = Agent(
        orch.url,
        created["token"],
        tmp_path / f"work-{name}",
        name,
        persistent=True,
        extra_args=["--allowed-commands", f"{sys.executable} {trainer}"],
        extra_env=env,
    ).start()
    agents.append(agent)
    orch.wait_worker(created["worker_id"], "idle")
    return str(created["worker_id"])


def test_a_bad_machine_is_quarantined_and_a_poison_job_stops_after_two_workers(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path, trainer: Path
) -> None:
    broken = start(orchestrator, agents, tmp_path, trainer, "broken", E2E_BROKEN_GPU="1")
    # Alone at first, so it certainly meets jobs: each fails, and comes back to it.
    first = orchestrator.submit(config_name="quick", target="worker", max_retries=0)["job_id"]

    def quarantined() -> dict[str, object] | None:
        worker = orchestrator.worker(broken)
        return worker if worker["quarantined"] else None

    worker = wait_until(quarantined, 60.0, 0.2, "the broken worker's quarantine")
    assert str(worker["quarantine_reason"]).startswith("3 infrastructure failures in ")
    assert str(worker["quarantine_reason"]).endswith("(CUDA error)")
    assert worker["status"] == "idle" and worker["connected"] is True, "it stays connected"

    healthy = [start(orchestrator, agents, tmp_path, trainer, f"ok-{n}") for n in (1, 2)]
    more = [orchestrator.submit(config_name="quick", target="worker")["job_id"] for _ in range(4)]
    for job_id in [first, *more]:
        job = orchestrator.wait_job(job_id, {"completed", "failed"}, timeout_s=90)
        assert job["status"] == "completed", job
        assert job["worker_id"] in healthy
    ran_on_broken = [
        attempt
        for job_id in [first, *more]
        for attempt in orchestrator.job(job_id)["attempt_history"]
        if attempt["worker_id"] == broken
    ]
    assert len(ran_on_broken) == 3, "no job reaches a quarantined worker"
    assert {(a["outcome"], a["kind"], a["signature"]) for a in ran_on_broken} == {
        ("failed", "infrastructure", "CUDA error")
    }
    audit = orchestrator.request("GET", f"/api/audit?kind=worker.quarantined&target={broken}")
    assert len(audit["events"]) == 1

    # A poison config: the same error on two workers ends it, without spending retries.
    began = time.monotonic()
    poison = orchestrator.submit(config_name="poison", target="worker", max_retries=3)["job_id"]
    job = orchestrator.wait_job(poison, {"completed", "failed"}, timeout_s=60)
    took = time.monotonic() - began
    assert job["status"] == "failed"
    history = job["attempt_history"]
    assert len(history) == 2
    assert {a["worker_id"] for a in history} == set(healthy)
    assert [a["kind"] for a in history] == ["job_error", "job_error"]
    assert job["error"].startswith(f"failed the same way on {history[0]['worker_id']} and ")
    print(f"poison job failed after {took:.1f} s")  # seconds, not minutes: see the report

    # Released by hand, the broken machine is back in the pool (and the API says so).
    released = orchestrator.request("POST", f"/api/admin/workers/{broken}/release", {})
    assert released["quarantined"] is False
