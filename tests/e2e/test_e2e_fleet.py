"""End to end: a real orchestrator process and real agent processes on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Agent, ApiError, Orchestrator, wait_until, write_tiny_config

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def configs_dir(tmp_path: Path) -> Path:
    configs = tmp_path / "configs"
    write_tiny_config(configs, "quick", max_train_steps=10, step_seconds=0.02)
    write_tiny_config(configs, "slow", max_train_steps=400, step_seconds=0.02)
    return configs


@pytest.fixture
def orchestrator(tmp_path: Path, configs_dir: Path) -> Iterator[Orchestrator]:
    orch = Orchestrator(tmp_path / "data", configs_dir).start()
    yield orch
    orch.stop()


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.stop()


def start_agent(
    orch: Orchestrator,
    agents: list[Agent],
    tmp_path: Path,
    name: str,
    *,
    persistent: bool = True,
    labels: dict[str, str] | None = None,
    admin_labels: dict[str, str] | None = None,
) -> tuple[Agent, str]:
    created = orch.create_worker(
        name, "persistent" if persistent else "ephemeral", labels=admin_labels
    )
    agent = Agent(
        orch.url,
        created["token"],
        tmp_path / f"work-{name}",
        name,
        persistent=persistent,
        labels=labels or {},
    ).start()
    agents.append(agent)
    orch.wait_worker(created["worker_id"], "idle")
    return agent, created["worker_id"]


def test_quick_start_ephemeral_runs_one_job_and_exits(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path
) -> None:
    agent, worker_id = start_agent(orchestrator, agents, tmp_path, "spot-1", persistent=False)
    submitted = orchestrator.submit(config_name="quick", target="worker")
    assert submitted["success"] is True
    job = orchestrator.wait_job(submitted["job_id"], {"completed", "failed"})
    assert job["status"] == "completed", job
    assert job["worker_id"] == worker_id
    assert job["progress"]["step"] == job["progress"]["total"] == 10
    assert agent.wait_exit(timeout_s=30) == 0, agent.log()
    orchestrator.wait_worker(worker_id, "offline")
    logs = orchestrator.request("GET", f"/api/queue/{submitted['job_id']}/logs")
    assert any("step" in line["line"] for line in logs["lines"])


def test_persistent_agent_stays_idle_after_its_job(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path
) -> None:
    agent, worker_id = start_agent(orchestrator, agents, tmp_path, "onprem-1")
    first = orchestrator.submit(config_name="quick", target="worker")
    orchestrator.wait_job(first["job_id"], {"completed"})
    orchestrator.wait_worker(worker_id, "idle")
    second = orchestrator.submit(config_name="quick", target="worker")
    assert orchestrator.wait_job(second["job_id"], {"completed"})["worker_id"] == worker_id
    assert agent.process is not None and agent.process.poll() is None


def test_labels_and_globs_route_jobs_to_the_right_agent(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path
) -> None:
    _, a100 = start_agent(
        orchestrator, agents, tmp_path, "a100-box", admin_labels={"gpu_type": "a100-80g"}
    )
    _, h100 = start_agent(
        orchestrator, agents, tmp_path, "h100-box", labels={"gpu_type": "h100", "team": "nlp"}
    )
    to_a100 = orchestrator.submit(config_name="quick", worker_labels={"gpu_type": "a100*"})
    to_nlp = orchestrator.submit(config_name="quick", worker_labels={"team": "nlp"})
    nowhere = orchestrator.submit(config_name="quick", worker_labels={"gpu_type": "tpu*"})
    assert orchestrator.wait_job(to_a100["job_id"], {"completed"})["worker_id"] == a100
    assert orchestrator.wait_job(to_nlp["job_id"], {"completed"})["worker_id"] == h100
    assert orchestrator.job(nowhere["job_id"])["status"] == "pending"
    assert "gpu_type" in nowhere["reason"]


def test_killed_agent_job_is_requeued_and_completes_elsewhere(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path
) -> None:
    victim, victim_id = start_agent(orchestrator, agents, tmp_path, "victim")
    submitted = orchestrator.submit(config_name="slow", target="worker", max_retries=2)
    job_id = submitted["job_id"]
    orchestrator.wait_job(job_id, {"running"})
    assert orchestrator.job(job_id)["worker_id"] == victim_id
    victim.kill()
    _, rescuer_id = start_agent(orchestrator, agents, tmp_path, "rescuer")
    job = orchestrator.wait_job(job_id, {"completed", "failed"}, timeout_s=90)
    assert job["status"] == "completed", job
    assert job["worker_id"] == rescuer_id
    attempts = job["attempt_history"]
    assert [a["worker_id"] for a in attempts] == [victim_id, rescuer_id]
    assert attempts[0]["outcome"] == "lost" and victim_id in attempts[0]["reason"]
    assert any(e["kind"] == "requeued" for e in job["timeline"])


def test_orchestrator_killed_mid_job_resumes_and_completes_exactly_once(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    write_tiny_config(
        orchestrator.configs_dir,
        "ledgered",
        max_train_steps=150,
        step_seconds=0.02,
        ledger_path=str(ledger),
    )
    _, worker_id = start_agent(orchestrator, agents, tmp_path, "steady")
    job_id = orchestrator.submit(config_name="ledgered", target="worker")["job_id"]
    orchestrator.wait_job(job_id, {"running"})
    orchestrator.kill()
    orchestrator.start()  # same port, same data directory
    job = orchestrator.wait_job(job_id, {"completed", "failed"}, timeout_s=90)
    assert job["status"] == "completed", (job, orchestrator.log())
    assert job["attempts"] == 1 and job["worker_id"] == worker_id
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [line["job_id"] for line in lines] == [job_id]


def test_drain_finishes_the_job_and_takes_no_more(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path
) -> None:
    _, worker_id = start_agent(orchestrator, agents, tmp_path, "drainee")
    running = orchestrator.submit(config_name="slow", target="worker")["job_id"]
    orchestrator.wait_job(running, {"running"})
    drained = orchestrator.request("POST", f"/api/admin/workers/{worker_id}/drain")
    assert drained["status"] == "draining"
    waiting = orchestrator.submit(config_name="quick", target="worker")["job_id"]
    assert orchestrator.wait_job(running, {"completed"}, timeout_s=60)["worker_id"] == worker_id
    assert orchestrator.worker(worker_id)["status"] == "draining"
    assert orchestrator.job(waiting)["status"] == "pending"
    orchestrator.request("POST", f"/api/admin/workers/{worker_id}/resume")
    assert orchestrator.wait_job(waiting, {"completed"})["worker_id"] == worker_id


def test_token_rotation_makes_the_running_agent_exit_with_invalid_token(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path
) -> None:
    agent, worker_id = start_agent(orchestrator, agents, tmp_path, "rotated")
    rotated = orchestrator.request("POST", f"/api/admin/workers/{worker_id}/token")
    assert rotated["token"].startswith("wt_") and rotated["token"] != agent.token
    assert agent.wait_exit(timeout_s=30) != 0
    assert "Invalid token" in agent.log()


def test_delete_is_refused_while_online_and_allowed_once_offline(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path
) -> None:
    agent, worker_id = start_agent(orchestrator, agents, tmp_path, "doomed")
    with pytest.raises(ApiError) as refused:
        orchestrator.request("DELETE", f"/api/admin/workers/{worker_id}")
    assert refused.value.status == 409
    # A persistent agent never goes offline by a drain: the advice is the forced delete.
    detail = refused.value.body["detail"]
    assert detail.startswith(f"worker {worker_id} is idle and runs no job")
    assert "delete it with ?force=true" in detail
    agent.stop()
    orchestrator.wait_worker(worker_id, "offline")
    deleted = orchestrator.request("DELETE", f"/api/admin/workers/{worker_id}")
    assert deleted["success"] is True
    with pytest.raises(ApiError) as gone:
        orchestrator.worker(worker_id)
    assert gone.value.status == 404
    wait_until(lambda: agent.process is not None and agent.process.poll() is not None)


def test_a_real_agent_on_fake_gpus_registers_them(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path
) -> None:
    created = orchestrator.create_worker("fake-gpus", "persistent")
    agent = Agent(
        orchestrator.url,
        created["token"],
        tmp_path / "work-fake-gpus",
        "fake-gpus",
        persistent=True,
        extra_env={"TUNEFLEET_FAKE_GPUS": "2xNVIDIA H100 80GB HBM3:80"},
    ).start()
    agents.append(agent)
    worker = orchestrator.wait_worker(created["worker_id"], "idle")
    assert worker["gpu_count"] == 2, worker
    assert worker["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert "tests and demos only" in agent.log()


def test_a_malformed_fake_gpu_spec_stops_the_agent_with_the_form(
    orchestrator: Orchestrator, tmp_path: Path
) -> None:
    created = orchestrator.create_worker("bad-fake", "persistent")
    agent = Agent(
        orchestrator.url,
        created["token"],
        tmp_path / "work-bad-fake",
        "bad-fake",
        extra_env={"TUNEFLEET_FAKE_GPUS": "lots"},
    ).start()
    assert agent.wait_exit(timeout_s=30) == 1
    assert "COUNTxNAME" in agent.log()
