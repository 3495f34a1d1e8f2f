"""End to end with real agents and the example trainer (issue 25): team a borrows both
workers; team b, below its quota, submits. The scheduler reclaims one worker: a's
youngest job is preempted (its trainer checkpoints on SIGTERM within the grace), b's
job runs on the freed worker within the grace and a few seconds, and a's preempted job
resumes from its checkpoint (at most one interval lost) with no retry spent, and
completes. Two one-GPU agents (TUNEFLEET_FAKE_GPUS), not four: the machine is small."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Agent, Orchestrator, wait_until, write_tiny_config

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

INTERVAL = 100  # checkpointing_steps
TOTAL = 600
STEP_S = 0.02
GRACE_S = 20
GPU = "1xNVIDIA A100-SXM4-80GB:80"


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
    args = ["--preempt-grace", str(GRACE_S), "--preempt-slack", "20"]
    args += ["--min-runtime-before-preempt", "0"]
    orch = Orchestrator(tmp_path / "data", configs, extra_args=args).start()
    yield orch
    orch.stop()


@pytest.fixture
def agents(orchestrator: Orchestrator, tmp_path: Path) -> Iterator[list[Path]]:
    processes, dirs = [], []
    for name in ("gpu-a", "gpu-b"):
        created = orchestrator.create_worker(name, "persistent")
        work = tmp_path / f"work-{name}"
        processes.append(
            Agent(
                orchestrator.url,
                created["token"],
                work,
                name,
                persistent=True,
                extra_env={"TUNEFLEET_FAKE_GPUS": GPU},
            ).start()
        )
        dirs.append(work)
        orchestrator.wait_worker(created["worker_id"], "idle")
    yield dirs
    for process in processes:
        process.stop()


def steps(progress: Path) -> list[int]:
    if not progress.exists():
        return []
    return [json.loads(line)["step"] for line in progress.read_text().splitlines() if line]


def attempt_dir(work_dirs: list[Path], job_id: str, attempt: int) -> Path:
    found = [d / "jobs" / job_id / f"attempt-{attempt}" for d in work_dirs]
    return next((p for p in found if p.exists()), found[0])


def test_a_team_below_its_quota_reclaims_a_worker_and_the_victim_resumes(
    orchestrator: Orchestrator, agents: list[Path]
) -> None:
    orch = orchestrator
    tokens: dict[str, str] = {}
    for user, team in (("alice", "a"), ("bob", "b")):
        orch.request("POST", "/api/admin/teams", {"name": team})
        orch.request(
            "POST", "/api/admin/users", {"name": user, "role": "researcher", "teams": [team]}
        )
        body = {"name": f"{user}-laptop", "user": user}
        tokens[user] = str(orch.request("POST", "/api/admin/tokens", body)["token"])
    orch.request("POST", "/api/admin/teams/a/quota", {"gpus": 0})
    orch.request("POST", "/api/admin/teams/b/quota", {"gpus": 1})

    def submit(user: str) -> str:
        body = {"config_name": "resumable", "target": "worker", "gpu_count": 1, "max_retries": 0}
        return str(orch.request("POST", "/api/queue/submit", body, token=tokens[user])["job_id"])

    theirs = [submit("alice"), submit("alice")]  # a borrows both workers
    for job_id in theirs:
        orch.wait_job(job_id, {"running"}, timeout_s=30)
    for job_id in theirs:  # past a checkpoint: a restart from 0 would lose work
        wait_until(
            lambda job_id=job_id: (
                max(steps(attempt_dir(agents, job_id, 1) / "progress.jsonl"), default=0)
                > INTERVAL + INTERVAL // 2
            ),
            timeout_s=60,
            what=f"{job_id} to pass its first checkpoint",
        )

    started = time.monotonic()
    mine = submit("bob")
    orch.wait_job(mine, {"running", "completed"}, timeout_s=GRACE_S + 15)
    reclaim_s = time.monotonic() - started
    [decision] = orch.request("GET", "/api/audit?kind=queue.reclaim")["events"]
    victim = decision["target"]
    assert victim in theirs and decision["detail"]["for_job"] == mine

    results: dict[str, Any] = {
        job_id: orch.wait_job(job_id, {"completed", "failed", "cancelled"}, timeout_s=120)
        for job_id in [*theirs, mine]
    }
    assert all(job["status"] == "completed" for job in results.values()), results
    done = results[victim]
    first, second = done["attempt_history"]
    assert first["outcome"] == "preempted" and second["outcome"] == "completed"
    assert done["max_retries"] == 0  # the preempted attempt spent no retry
    stopped_at = steps(attempt_dir(agents, victim, 1) / "progress.jsonl")[-1]
    resumed = steps(attempt_dir(agents, victim, 2) / "progress.jsonl")
    checkpoint = resumed[0] - 1
    assert checkpoint > 0, "the second attempt resumed from a checkpoint, not from step 0"
    assert 0 <= stopped_at - checkpoint <= INTERVAL  # at most one interval lost
    assert resumed[-1] == TOTAL
    other = next(job_id for job_id in theirs if job_id != victim)
    assert [a["outcome"] for a in results[other]["attempt_history"]] == ["completed"]
    assert reclaim_s <= GRACE_S + 15
