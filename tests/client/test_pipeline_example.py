"""docs/examples/pipeline.py, run as a user would (its own process, settings from the
environment) against a real orchestrator and agent: it trains, downloads, checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.harness import ADMIN_TOKEN, Orchestrator

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "pipeline.py"


def _run(
    orchestrator: Orchestrator, *args: str, token: str = ADMIN_TOKEN
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TUNEFLEET_URL": orchestrator.url, "TUNEFLEET_TOKEN": token}
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )


def test_the_pipeline_trains_downloads_and_checks_the_model(
    orchestrator: Orchestrator, agent: str, tmp_path: Path
) -> None:
    done = _run(orchestrator, "--config", "tiny-example", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "completed on" in done.stdout and "check passed" in done.stdout
    assert (tmp_path / "model.json").is_file()


def test_the_pipeline_fails_when_training_fails_or_the_check_does(
    orchestrator: Orchestrator, agent: str, tmp_path: Path
) -> None:
    failed = _run(orchestrator, "--config", "broken", "--out", str(tmp_path / "a"))
    assert failed.returncode == 1 and "training failed: j_" in failed.stderr
    strict = _run(orchestrator, "--out", str(tmp_path / "b"), "--tolerance", "0.0000001")
    assert strict.returncode == 1 and "check failed: weight" in strict.stderr
    refused = _run(orchestrator, "--out", str(tmp_path / "c"), token="tf_wrong")
    assert refused.returncode == 1 and "rejected the API token" in refused.stderr
