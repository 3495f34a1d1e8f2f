"""`tunefleet jobs artifacts|download` against a real orchestrator and agent: a job's
trainer stores its output through the upload endpoint, the CLI lists it and downloads it
with the checksum it was uploaded with."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.cli.conftest import POOL
from tests.e2e.harness import Orchestrator

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
Invoke = Callable[..., Result]

# A trainer that stores one file the way SimpleTuner's trainer publishes: PUT
# {endpoint}/{bucket}/{key} with X-Upload-Token, from the environment the agent sets.
UPLOADER = """
import os, urllib.request
data = bytes(range(256)) * 4096
request = urllib.request.Request(
    os.environ["SIMPLETUNER_UPLOAD_ENDPOINT"] + "/outputs/final/model.safetensors",
    data=data, method="PUT",
    headers={"X-Upload-Token": os.environ["SIMPLETUNER_UPLOAD_TOKEN"]},
)
urllib.request.urlopen(request).read()
"""
DATA = bytes(range(256)) * 4096


def test_a_stored_output_is_listed_and_downloaded_with_its_checksum(
    tf: Invoke, orchestrator: Orchestrator, agent: str, tmp_path: Path
) -> None:
    job_id = orchestrator.submit(
        config={"model_type": "lora"},
        command=[sys.executable, "-c", UPLOADER],
        target="worker",
        worker_labels=POOL,
    )["job_id"]
    job = orchestrator.wait_job(job_id, {"completed", "failed", "cancelled"})
    assert job["status"] == "completed", job
    listed = tf("jobs", "artifacts", job_id, "--json")
    assert listed.exit_code == 0, listed.output
    (item,) = json.loads(listed.stdout)["artifacts"]
    assert item["key"] == "final/model.safetensors"
    assert item["sha256"] == hashlib.sha256(DATA).hexdigest()
    table = tf("jobs", "artifacts", job_id)
    assert "final/model.safetensors" in table.stdout and "1.0 MiB" in table.stdout
    result = tf("jobs", "download", job_id, "-o", str(tmp_path), "--quiet")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "final" / "model.safetensors").read_bytes() == DATA
    one = tf("jobs", "download", job_id, "final/model.safetensors", "--to", str(tmp_path / "one"))
    assert one.exit_code == 0, one.output
    assert (tmp_path / "one" / "final" / "model.safetensors").read_bytes() == DATA
    missing = tf("jobs", "download", job_id, "nope.bin", "-o", str(tmp_path))
    assert missing.exit_code == 1 and "has no artifact nope.bin" in missing.output
    # A download cut off midway left its .part: the next one continues it (a Range
    # request) and ends with the whole file, checksum checked.
    resumed = tmp_path / "resumed" / "final"
    resumed.mkdir(parents=True)
    (resumed / "model.safetensors.part").write_bytes(DATA[:1000])
    again = tf("jobs", "download", job_id, "-o", str(tmp_path / "resumed"), "--quiet")
    assert again.exit_code == 0, again.output
    assert (resumed / "model.safetensors").read_bytes() == DATA
    assert not (resumed / "model.safetensors.part").exists()
