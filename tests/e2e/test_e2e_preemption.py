"""End to end: preemption loses no work (issue 25). A real orchestrator, a real agent and
the example trainer with checkpointing_steps: a running job is preempted through the API,
its trainer writes a checkpoint on SIGTERM within the grace, the agent stores it and
reports, the attempt ends ``preempted`` and the job, with no retries to spend, runs again
from that checkpoint (at most one checkpoint interval lost) and completes."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Agent, Orchestrator, wait_until, write_tiny_config

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

INTERVAL = 100  # checkpointing_steps
TOTAL = 600
STEP_S = 0.02


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[Orchestrator]:
    configs = tmp_path / "configs"
    write_tiny_config(
        configs,
        "resumable",
        max_train_steps=TOTAL,
        step_seconds=STEP_S,
        checkpointing_steps=INTERVAL,
    )
    orch = Orchestrator(
        tmp_path / "data", configs, extra_args=["--preempt-grace", "20", "--preempt-slack", "20"]
    ).start()
    yield orch
    orch.stop()


@pytest.fixture
def agent(orchestrator: Orchestrator, tmp_path: Path) -> Iterator[str]:
    created = orchestrator.create_worker("gpu-a", "persistent")
    process = Agent(
        orchestrator.url, created["token"], tmp_path / "work", "gpu-a", persistent=True
    ).start()
    orchestrator.wait_worker(created["worker_id"], "idle")
    yield created["worker_id"]
    process.stop()


def steps(progress: Path) -> list[int]:
    return [json.loads(line)["step"] for line in progress.read_text().splitlines() if line]


def test_a_preempted_job_resumes_from_its_checkpoint_and_completes_without_a_retry(
    orchestrator: Orchestrator, agent: str, tmp_path: Path
) -> None:
    job_id = orchestrator.submit(config_name="resumable", target="worker", max_retries=0)["job_id"]
    orchestrator.wait_job(job_id, {"running"})
    jobs_dir = tmp_path / "work" / "jobs" / job_id
    attempt_1 = jobs_dir / "attempt-1"
    # Past the first checkpoint interval, so there is work a restart from 0 would lose.
    wait_until(
        lambda: (
            (attempt_1 / "progress.jsonl").exists()
            and max(steps(attempt_1 / "progress.jsonl"), default=0) > INTERVAL + INTERVAL // 2
        ),
        timeout_s=60,
        what="the trainer to pass its first checkpoint",
    )

    reply = orchestrator.request("POST", f"/api/jobs/{job_id}/preempt", {"reason": "e2e reclaim"})
    assert (reply["status"], reply["attempt"], reply["grace_seconds"]) == ("preempting", 1, 20)

    done = orchestrator.wait_job(job_id, {"completed", "failed", "cancelled"}, timeout_s=120)
    assert done["status"] == "completed", done
    first, second = done["attempt_history"]
    assert first["outcome"] == "preempted" and first["reason"].endswith(": e2e reclaim")
    assert second["outcome"] == "completed"
    assert done["max_retries"] == 0  # two attempts, no retry: the preempted one is apart

    stopped_at = steps(attempt_1 / "progress.jsonl")[-1]
    attempt_2 = jobs_dir / "attempt-2"
    resumed = steps(attempt_2 / "progress.jsonl")
    checkpoint = resumed[0] - 1
    assert checkpoint > 0, "the second attempt resumed from a checkpoint, not from step 0"
    # The trainer checkpoints on SIGTERM: at most one checkpoint interval is lost.
    assert 0 <= stopped_at - checkpoint <= INTERVAL
    assert resumed[-1] == TOTAL
    timeline = json.dumps(done["timeline"])
    assert "preempted" in timeline
    assert f"resumed from checkpoint-{checkpoint}" in timeline
    # It saved on SIGTERM, within the grace (its agent did not have to kill it).
    assert f"SIGTERM at step {checkpoint}: saved" in (attempt_1 / "output.log").read_text()

    metrics = orchestrator_metrics(orchestrator)
    assert 'tunefleet_preemptions_total{team="default"} 1.0' in metrics


def orchestrator_metrics(orch: Orchestrator) -> str:
    with urllib.request.urlopen(orch.url + "/metrics", timeout=10) as resp:
        return resp.read().decode()
