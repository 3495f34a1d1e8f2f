"""Relative paths as `make run` passes them (`--data-dir .tunefleet --configs-dir configs`)
and as a user types them (`--work-dir relwork`): jobs still run, because every path is
made absolute at start (a job runs in its own directory, where a relative path names
some other place)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Agent, Orchestrator, write_tiny_config

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def relative_orchestrator(tmp_path: Path) -> Iterator[Orchestrator]:
    write_tiny_config(tmp_path / "configs", "quick", max_train_steps=5, step_seconds=0.02)
    # The admin's local jobs run as this user in <local-work-dir>/own-user (isolation, and
    # where an isolated runner works: tests/e2e/test_e2e_permissions.py).
    orch = Orchestrator(
        Path(".tunefleet"),
        Path("configs"),
        cwd=tmp_path,
        local_runner=True,
        extra_args=["--local-work-dir", "localwork"],
    ).start()
    yield orch
    orch.stop()


def test_a_local_job_completes_with_relative_data_and_work_dirs(
    relative_orchestrator: Orchestrator, tmp_path: Path
) -> None:
    orch = relative_orchestrator
    submitted = orch.submit(config_name="quick", target="local")
    job = orch.wait_job(submitted["job_id"], {"completed", "failed"})
    assert job["status"] == "completed", (job, orch.log())
    assert job["progress"]["step"] == 5
    assert (tmp_path / "localwork" / "own-user" / "jobs" / submitted["job_id"]).is_dir()


def test_an_agent_with_a_relative_work_dir_completes_its_job(
    relative_orchestrator: Orchestrator, tmp_path: Path
) -> None:
    orch = relative_orchestrator
    created = orch.create_worker("relwork-1", "ephemeral")
    agent = Agent(orch.url, created["token"], Path("relwork"), "relwork-1", cwd=tmp_path).start()
    try:
        orch.wait_worker(created["worker_id"], "idle")
        submitted = orch.submit(config_name="quick", target="worker")
        job = orch.wait_job(submitted["job_id"], {"completed", "failed"})
        assert job["status"] == "completed", (job, agent.log())
        assert (tmp_path / "relwork" / "jobs" / submitted["job_id"]).is_dir()
    finally:
        agent.stop()
