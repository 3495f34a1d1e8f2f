"""End to end with real agents and the example trainer (issue 25): team a borrows all
four workers; team b, below its quota of two, submits two jobs. The scheduler reclaims
two workers: two of a's jobs are preempted (their trainers checkpoint on SIGTERM within
the grace), b's jobs run on the freed workers within the grace and a few seconds, and
a's preempted jobs resume from their checkpoints (at most one interval lost) with no
retry spent, and complete. Then the chaos checker's invariants hold over the whole run:
every job completed exactly once (one completed attempt, one ledger line), no job ran
on two workers at once, no worker or agent ran two trainers at once, the attempt chain
is whole, and the preempted attempts spent no retry.

Four one-GPU agents (TUNEFLEET_FAKE_GPUS). The trainer is the example trainer bracketed
by the chaos suites' markers (tests/chaos/chaos_trainer.py), so that the checker sees
each trainer process from its own side."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.chaos_evidence import load_executions, load_jobs, load_ledger
from tests.chaos.chaos_harness import CHAOS_TRAINER
from tests.chaos.chaos_invariants import Evidence, check
from tests.e2e.harness import Agent, Orchestrator, wait_until, write_tiny_config

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

INTERVAL = 100  # checkpointing_steps
TOTAL = 1200  # 24 s of steps: a's jobs are still running when b's reclaims come
STEP_S = 0.02
GRACE_S = 20
GPU = "1xNVIDIA A100-SXM4-80GB:80"
WORKERS = 4
B_QUOTA = 2  # b submits this many jobs: two reclaims, two victims
FINAL = {"completed", "failed", "cancelled"}


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[Orchestrator]:
    configs = tmp_path / "configs"
    write_tiny_config(
        configs,
        "resumable",
        tunefleet_command=["python", str(CHAOS_TRAINER)],
        max_train_steps=TOTAL,
        step_seconds=STEP_S,
        checkpointing_steps=INTERVAL,
        ledger_path=str(tmp_path / "ledger.jsonl"),
        chaos_markers_path=str(tmp_path / "markers.jsonl"),
    )
    args = ["--preempt-grace", str(GRACE_S), "--preempt-slack", "20"]
    args += ["--min-runtime-before-preempt", "0"]
    orch = Orchestrator(tmp_path / "data", configs, extra_args=args).start()
    yield orch
    orch.stop()


@pytest.fixture
def agents(orchestrator: Orchestrator, tmp_path: Path) -> Iterator[dict[Path, str]]:
    """The agents' work dirs, each with its worker's id."""
    processes: list[Agent] = []
    work_dirs: dict[Path, str] = {}
    try:
        for index in range(WORKERS):
            name = f"gpu-{index}"
            created = orchestrator.create_worker(name, "persistent")
            work = tmp_path / f"work-{name}"
            agent = Agent(
                orchestrator.url,
                created["token"],
                work,
                name,
                persistent=True,
                # The marker-writing trainer is not among a worker's default commands.
                extra_args=["--allowed-commands", f"python {CHAOS_TRAINER}"],
                extra_env={"TUNEFLEET_FAKE_GPUS": GPU},
            )
            processes.append(agent.start())
            work_dirs[work] = created["worker_id"]
        for worker_id in work_dirs.values():  # all started first: they come up together
            orchestrator.wait_worker(worker_id, "idle", timeout_s=90)
        yield work_dirs
    finally:
        for process in processes:
            process.stop()


def steps(progress: Path) -> list[int]:
    if not progress.exists():
        return []
    return [json.loads(line)["step"] for line in progress.read_text().splitlines() if line]


def attempt_dir(work_dirs: dict[Path, str], job_id: str, attempt: int) -> Path:
    found = [d / "jobs" / job_id / f"attempt-{attempt}" for d in work_dirs]
    return next((p for p in found if p.exists()), found[0])


def test_a_team_below_its_quota_reclaims_workers_and_the_victims_resume(
    orchestrator: Orchestrator, agents: dict[Path, str], tmp_path: Path
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
    orch.request("POST", "/api/admin/teams/b/quota", {"gpus": B_QUOTA})

    def submit(user: str) -> str:
        body = {"config_name": "resumable", "target": "worker", "gpu_count": 1, "max_retries": 0}
        return str(orch.request("POST", "/api/queue/submit", body, token=tokens[user])["job_id"])

    def statuses(job_ids: list[str]) -> dict[str, str]:
        return {job_id: orch.job(job_id)["status"] for job_id in job_ids}

    theirs = [submit("alice") for _ in range(WORKERS)]  # a borrows all four workers
    wait_until(
        lambda: set(statuses(theirs).values()) == {"running"},
        timeout_s=90,
        interval_s=0.2,
        what="a's jobs to run on all four workers",
    )
    for job_id in theirs:  # past a checkpoint: a restart from 0 would lose work
        wait_until(
            lambda job_id=job_id: (
                max(steps(attempt_dir(agents, job_id, 1) / "progress.jsonl"), default=0)
                > INTERVAL + INTERVAL // 2
            ),
            timeout_s=90,
            what=f"{job_id} to pass its first checkpoint",
        )

    mine = [submit("bob") for _ in range(B_QUOTA)]
    # Within the grace and a few seconds (generous: the machine is small and shared).
    wait_until(
        lambda: set(statuses(mine).values()) <= {"running", "completed"},
        timeout_s=GRACE_S + 20,
        interval_s=0.2,
        what="b's jobs to run on reclaimed workers",
    )
    decisions = orch.request("GET", "/api/audit?kind=queue.reclaim")["events"]
    victims = sorted({decision["target"] for decision in decisions})
    assert len(decisions) == B_QUOTA and len(victims) == B_QUOTA, decisions
    assert set(victims) <= set(theirs)
    assert sorted(decision["detail"]["for_job"] for decision in decisions) == sorted(mine)

    results: dict[str, Any] = {}
    for job_id in [*theirs, *mine]:
        results[job_id] = orch.wait_job(job_id, FINAL, timeout_s=240)
    assert all(job["status"] == "completed" for job in results.values()), results
    for victim in victims:
        done = results[victim]
        first, second = done["attempt_history"]
        assert first["outcome"] == "preempted" and second["outcome"] == "completed"
        assert done["max_retries"] == 0  # the preempted attempt spent no retry
        stopped_at = steps(attempt_dir(agents, victim, 1) / "progress.jsonl")[-1]
        resumed = steps(attempt_dir(agents, victim, 2) / "progress.jsonl")
        checkpoint = resumed[0] - 1
        assert checkpoint > 0, f"{victim} resumed from step 0, not from a checkpoint"
        assert 0 <= stopped_at - checkpoint <= INTERVAL  # at most one interval lost
        assert resumed[-1] == TOTAL
    for job_id in [*theirs, *mine]:
        if job_id not in victims:
            assert [a["outcome"] for a in results[job_id]["attempt_history"]] == ["completed"]

    # Every trainer has ended (every job completed), so its end marker is in.
    evidence = Evidence(
        jobs=load_jobs(orch),
        accepted={*theirs, *mine},
        executions=load_executions(tmp_path / "markers.jsonl", agents, killed_at={}),
        ledger=load_ledger(tmp_path / "ledger.jsonl"),
        killed_agent_pids=set(),  # nothing was killed: every agent ran throughout
    )
    findings = check(evidence)
    print(dict(findings.stats))  # shown on failure, and with -s
    assert not findings.violations, (findings.violations, dict(findings.stats))
    # One trainer per attempt: four of a's, two of b's, two resumed victims.
    assert findings.stats["trainer_runs"] == WORKERS + 2 * B_QUOTA, dict(findings.stats)
    assert findings.stats["jobs_completed"] == WORKERS + B_QUOTA
