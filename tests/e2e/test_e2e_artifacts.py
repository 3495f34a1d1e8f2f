"""End to end: the work survives the worker (issue 12). A real orchestrator, real agents
and the example trainer, with the embedded store and with a bucket (moto's standalone S3
server process; bytes then go worker <-> bucket through presigned URLs): checkpoints go
to the store while it trains, the
first agent is killed with SIGKILL mid-run (its trainer with it, as a lost machine's
would be), the job is retried on a second agent that restores the newest stored
checkpoint and resumes from it, and the final model is downloadable with the checksum
it was stored with."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    ADMIN_TOKEN,
    TUNEFLEET,
    Agent,
    Orchestrator,
    wait_until,
    write_tiny_config,
)
from tests.fakes.moto_s3 import AWS_ENV, moto_server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

INTERVAL = 200  # checkpointing_steps
STEP_S = 0.02  # 4 s between checkpoints: longer than the agent's two looks (1 s apart)


@pytest.fixture(params=["embedded", "bucket"])
def store_args(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[str]]:
    if request.param == "embedded":
        yield []
        return
    boto3 = pytest.importorskip("boto3", reason="boto3 is in the test extra")
    with moto_server(tmp_path) as s3_url:
        for name, value in AWS_ENV.items():
            monkeypatch.setenv(name, value)  # the orchestrator's; agents need none
        boto3.client("s3", endpoint_url=s3_url).create_bucket(Bucket="e2e")
        yield ["--artifact-store", "s3://e2e/fleet", "--s3-endpoint-url", s3_url]


@pytest.fixture
def orchestrator(tmp_path: Path, store_args: list[str]) -> Iterator[Orchestrator]:
    configs = tmp_path / "configs"
    write_tiny_config(
        configs,
        "resumable",
        max_train_steps=900,
        step_seconds=STEP_S,
        checkpointing_steps=INTERVAL,
        checkpoint_bytes=3 * 1024 * 1024,
    )
    orch = Orchestrator(tmp_path / "data", configs, extra_args=store_args).start()
    yield orch
    orch.stop()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.stop()


def start_agent(orch: Orchestrator, agents: list[Agent], tmp_path: Path, name: str) -> Agent:
    created = orch.create_worker(name, "persistent")
    agent = Agent(orch.url, created["token"], tmp_path / f"work-{name}", name, persistent=True)
    agents.append(agent.start())
    orch.wait_worker(created["worker_id"], "idle")
    return agent


def artifacts(orch: Orchestrator, job_id: str) -> dict[str, Any]:
    return orch.request("GET", f"/api/queue/{job_id}/artifacts")  # type: ignore[no-any-return]


def kill_processes_in(directory: Path) -> None:
    """SIGKILL every process running in ``directory`` (the orphaned trainer's group)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if Path(os.readlink(entry / "cwd")) == directory:
                os.killpg(os.getpgid(int(entry.name)), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def steps(progress: Path) -> list[int]:
    return [json.loads(line)["step"] for line in progress.read_text().splitlines() if line]


def test_a_job_killed_mid_training_resumes_on_another_worker_from_its_stored_checkpoint(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path, store_args: list[str]
) -> None:
    first = start_agent(orchestrator, agents, tmp_path, "gpu-a")
    job_id = orchestrator.submit(config_name="resumable", target="worker")["job_id"]
    orchestrator.wait_job(job_id, {"running"})

    stored = wait_until(
        lambda: artifacts(orchestrator, job_id)["checkpoints"],
        timeout_s=60,
        what="a checkpoint stored while the trainer runs",
    )
    attempt_1 = tmp_path / "work-gpu-a" / "jobs" / job_id / "attempt-1"
    first.kill()  # SIGKILL: no goodbye, no last upload
    kill_processes_in(attempt_1.resolve())
    written = max(int(p.name.split("-")[1]) for p in (attempt_1 / "output").glob("checkpoint-*"))
    newest = max(c["step"] for c in artifacts(orchestrator, job_id)["checkpoints"])
    assert newest >= stored[0]["step"] > 0

    second = start_agent(orchestrator, agents, tmp_path, "gpu-b")
    done = orchestrator.wait_job(job_id, {"completed", "failed"}, timeout_s=120)
    assert done["status"] == "completed", (done, second.log()[-3000:])

    attempt_dir = next((tmp_path / "work-gpu-b" / "jobs" / job_id).iterdir())
    resumed = steps(attempt_dir / "progress.jsonl")
    assert resumed[0] == newest + 1  # resumed from the newest stored checkpoint, past 0
    # ... which is the last checkpoint the killed trainer wrote, or the one before it when
    # the last was still on its way up: at most one checkpoint interval of work is lost.
    assert written - newest <= INTERVAL
    assert resumed[-1] == 900
    log = (attempt_dir / "output.log").read_text()
    assert f"restored checkpoint-{newest} from the artifact store" in log
    assert f"resumed from checkpoint-{newest}" in json.dumps(orchestrator.job(job_id))

    # The final model: listed with its checksum, downloadable through the API and the CLI.
    model = attempt_dir / "output" / "model.json"
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    listed = {a["key"]: a for a in artifacts(orchestrator, job_id)["artifacts"]}
    assert listed["model.json"]["size"] == model.stat().st_size
    request = urllib.request.Request(
        f"{orchestrator.url}/api/queue/{job_id}/artifacts/model.json",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert hashlib.sha256(response.read()).hexdigest() == sha
    target = tmp_path / "downloaded"
    env = {**os.environ, "TUNEFLEET_URL": orchestrator.url, "TUNEFLEET_TOKEN": ADMIN_TOKEN}
    cli = subprocess.run(
        [*TUNEFLEET, "jobs", "download", job_id, "model.json", "--to", str(target)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert hashlib.sha256((target / "model.json").read_bytes()).hexdigest() == sha
    # With a bucket the file passed the orchestrator by; the agent's outputs manifest,
    # stored last, gives it its recorded SHA-256.
    assert listed["model.json"]["sha256"] == sha
