"""`--follow` against jobs a real agent runs with the example trainer: the final line and
the exit code for a completed, a failed, a cancelled and an interrupted follow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest
from click.testing import Result

from tests.e2e.harness import ADMIN_TOKEN, Orchestrator, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
Invoke = Callable[..., Result]
ON_POOL = ("--label", "pool=cli", "--target", "worker")


def test_submit_follow_completed_exits_0_with_progress_and_final_line(
    tf: Invoke, agent: str
) -> None:
    result = tf("jobs", "submit", "quick", *ON_POOL, "--follow")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("Submitted j_")
    job_id = lines[0].split()[1].rstrip(":")
    assert any(f"{job_id} step" in line and "loss" in line for line in lines)
    assert lines[-1].startswith(f"{job_id} completed on {agent} in ")
    assert ": step 10/10, loss " in lines[-1]


def test_submit_follow_with_logs_shows_the_trainers_lines(tf: Invoke, agent: str) -> None:
    result = tf("jobs", "submit", "quick", *ON_POOL, "--follow", "--logs")
    assert result.exit_code == 0, result.output
    assert "step 10/10 loss" in result.stdout  # the trainer's own output
    assert "done: w " in result.stdout
    assert " completed on " in result.stdout.strip().splitlines()[-1]


def test_submit_follow_failed_exits_1_with_the_error(tf: Invoke, agent: str) -> None:
    result = tf("jobs", "submit", "broken", *ON_POOL, "--retries", "0", "--follow")
    assert result.exit_code == 1, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert " failed on " in last and "after 1 attempt(s): " in last
    assert "exit code 3" in last and "injected failure at step 4" in last  # the trainer's


def test_follow_json_prints_the_final_job_only(tf: Invoke, agent: str) -> None:
    result = tf("jobs", "submit", "quick", *ON_POOL, "--follow", "--json")
    assert result.exit_code == 0, result.output
    detail = json.loads(result.stdout)
    assert detail["status"] == "completed"
    assert detail["finished_at"].endswith("Z")
    assert detail["progress"]["step"] == 10


def _cancel_when_running(orch: Orchestrator, done: threading.Event) -> None:
    def running_job() -> str | None:
        jobs = orch.request("GET", "/api/queue?status=running")["jobs"]
        return next((j["job_id"] for j in jobs if j.get("progress")), None)

    job_id = wait_until(running_job, timeout_s=30, what="the slow job to run")
    orch.request("POST", f"/api/queue/{job_id}/cancel", {"reason": "test"})
    done.set()


def test_submit_follow_cancelled_from_elsewhere_exits_3(
    tf: Invoke, orchestrator: Orchestrator, agent: str
) -> None:
    cancelled = threading.Event()
    canceller = threading.Thread(
        target=_cancel_when_running, args=(orchestrator, cancelled), daemon=True
    )
    canceller.start()
    result = tf("jobs", "submit", "slow", *ON_POOL, "--follow")
    canceller.join(timeout=5)
    assert cancelled.is_set()
    assert result.exit_code == 3, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert " cancelled on " in last and "cancelled by token:" in last


def test_logs_follow_exits_with_the_outcome(
    tf: Invoke, orchestrator: Orchestrator, agent: str
) -> None:
    job_id = orchestrator.submit(
        config_name="quick", target="worker", worker_labels={"pool": "cli"}
    )["job_id"]
    result = tf("jobs", "logs", job_id, "--follow")
    assert result.exit_code == 0, result.output
    assert "step 10/10 loss" in result.stdout
    assert result.stderr.strip() == f"{job_id} completed"
    as_json = tf("jobs", "logs", job_id, "--follow", "--json", "--stream", "stdout")
    lines = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert lines and all(line["stream"] == "stdout" for line in lines)


def test_show_follow_on_an_ended_job_returns_at_once(
    tf: Invoke, orchestrator: Orchestrator, agent: str
) -> None:
    job_id = orchestrator.submit(
        config_name="broken", target="worker", max_retries=0, worker_labels={"pool": "cli"}
    )["job_id"]
    orchestrator.wait_job(job_id, {"failed"})
    result = tf("jobs", "show", job_id, "--follow")
    assert result.exit_code == 1
    assert result.stdout.strip().splitlines()[-1].startswith(f"{job_id} failed on {agent}")


def test_ctrl_c_while_following_exits_130_and_leaves_the_job(orchestrator: Orchestrator) -> None:
    waiting = orchestrator.submit(
        config_name="quick", target="worker", worker_labels={"pool": "none"}
    )
    job_id = waiting["job_id"]
    env = {**os.environ, "TUNEFLEET_URL": orchestrator.url, "TUNEFLEET_TOKEN": ADMIN_TOKEN}
    process = subprocess.Popen(
        [sys.executable, "-m", "tunefleet", "jobs", "show", job_id, "--follow"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # the follower has the job's state
        assert first.startswith(f"{job_id} pending"), first
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert f"Stopped following {job_id}; the job goes on." in stderr
    assert orchestrator.job(job_id)["status"] == "pending"
    orchestrator.request("POST", f"/api/queue/{job_id}/cancel")
