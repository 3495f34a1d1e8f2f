"""End to end with the bucket store (issue 12): the same flow as test_e2e_artifacts, with
the orchestrator keeping artifacts in an S3 bucket (moto's standalone server, a real S3
API process on loopback). The agents' files go to the bucket through presigned URLs, a
job killed mid-training resumes on a second agent from the newest checkpoint in the
bucket, and the final model comes back through the API and the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import (
    ADMIN_TOKEN,
    TUNEFLEET,
    Agent,
    Orchestrator,
    wait_until,
    write_tiny_config,
)
from tests.e2e.test_e2e_artifacts import (
    INTERVAL,
    STEP_S,
    agents,  # noqa: F401 - a fixture
    artifacts,
    kill_processes_in,
    start_agent,
    steps,
)
from tests.fakes.moto_s3 import AWS_ENV, create_bucket, moto_server

pytest.importorskip("boto3", reason="boto3 is in the test extra: pip install -e '.[test]'")
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
BUCKET = "tunefleet-e2e"


@pytest.fixture
def orchestrator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Orchestrator]:
    with moto_server(tmp_path) as s3_url:
        for name, value in AWS_ENV.items():
            monkeypatch.setenv(name, value)  # the orchestrator process inherits them
        create_bucket(s3_url, BUCKET)
        configs = tmp_path / "configs"
        write_tiny_config(
            configs,
            "resumable",
            max_train_steps=900,
            step_seconds=STEP_S,
            checkpointing_steps=INTERVAL,
            checkpoint_bytes=3 * 1024 * 1024,
        )
        args = ["--artifact-store", f"s3://{BUCKET}/e2e", "--s3-endpoint-url", s3_url]
        orch = Orchestrator(tmp_path / "data", configs, extra_args=args).start()
        try:
            yield orch
        finally:
            orch.stop()


def test_with_a_bucket_a_killed_job_resumes_from_the_bucket_and_its_model_comes_back(
    orchestrator: Orchestrator,
    agents: list[Agent],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    first = start_agent(orchestrator, agents, tmp_path, "gpu-a")
    job_id = orchestrator.submit(config_name="resumable", target="worker")["job_id"]
    orchestrator.wait_job(job_id, {"running"})
    wait_until(
        lambda: artifacts(orchestrator, job_id)["checkpoints"],
        timeout_s=90,
        what="a checkpoint stored in the bucket while the trainer runs",
    )
    attempt_1 = tmp_path / "work-gpu-a" / "jobs" / job_id / "attempt-1"
    first.kill()
    kill_processes_in(attempt_1.resolve())
    lost_at = max(steps(attempt_1 / "progress.jsonl"))
    newest = max(c["step"] for c in artifacts(orchestrator, job_id)["checkpoints"])
    # Nothing of the job is on the orchestrator's disk: the bytes are in the bucket.
    assert not (tmp_path / "data" / "artifacts" / "jobs" / job_id).exists()

    second = start_agent(orchestrator, agents, tmp_path, "gpu-b")
    done = orchestrator.wait_job(job_id, {"completed", "failed"}, timeout_s=150)
    assert done["status"] == "completed", (done, second.log()[-3000:])
    attempt_dir = next((tmp_path / "work-gpu-b" / "jobs" / job_id).iterdir())
    resumed = steps(attempt_dir / "progress.jsonl")
    assert resumed[0] == newest + 1
    assert lost_at - newest <= INTERVAL
    assert f"resumed from checkpoint-{newest}" in json.dumps(orchestrator.job(job_id))

    model = attempt_dir / "output" / "model.json"
    data = model.read_bytes()
    listed = {a["key"]: a for a in artifacts(orchestrator, job_id)["artifacts"]}
    assert listed["model.json"]["size"] == len(data)
    # The API answers with a presigned URL of the bucket; urllib follows it.
    request = urllib.request.Request(
        f"{orchestrator.url}/api/queue/{job_id}/artifacts/model.json",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert hashlib.sha256(response.read()).hexdigest() == hashlib.sha256(data).hexdigest()
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
    assert (target / "model.json").read_bytes() == data
