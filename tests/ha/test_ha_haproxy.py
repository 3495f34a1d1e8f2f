"""The other way to fail over: both orchestrators behind haproxy, which sends requests
to the one whose /readyz is 200. An agent given only haproxy's URL runs a job through a
kill -9 of the active orchestrator; the job completes once. Uses docs/examples/haproxy.cfg
with the addresses replaced; skipped where Debian's haproxy is not installed."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    Agent,
    ApiError,
    Orchestrator,
    free_port,
    wait_until,
    write_tiny_config,
)
from tests.ha.ha_cluster import Cluster, role, wait_role

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.timeout(180)]

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "haproxy.cfg"


def _config(port: int, first: str, second: str) -> str:
    text = EXAMPLE.read_text()
    text = text.replace("bind :8000", f"bind 127.0.0.1:{port}")
    text = text.replace("orch-a.internal:8001", first).replace("orch-b.internal:8001", second)
    return text


@pytest.fixture
def haproxy_bin() -> str:
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
    if found is None:
        pytest.skip("haproxy is not installed (Debian: apt-get install haproxy)")
    return found


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    write_tiny_config(tmp_path / "configs", "steady", max_train_steps=300, step_seconds=0.03)
    built = Cluster(tmp_path, pg_url, lease_s=1.0)
    try:
        yield built
    finally:
        built.stop()


def test_an_agent_behind_haproxy_keeps_its_job_through_a_takeover(
    tmp_path: Path, cluster: Cluster, haproxy_bin: str
) -> None:
    first = cluster.add("a").start()
    second = cluster.add("b").start(wait_ready=False)
    port = free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(_config(port, f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"))
    check = subprocess.run([haproxy_bin, "-c", "-f", str(config)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    proxy = subprocess.Popen(
        [haproxy_bin, "-db", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "haproxy.log").open("wb"),
    )
    agent: Agent | None = None
    try:
        front = Orchestrator(tmp_path / "unused", tmp_path / "configs", port=port)
        if proxy.poll() is not None:
            raise AssertionError(f"haproxy exited: {(tmp_path / 'haproxy.log').read_text()}")
        # haproxy starts with both servers up; its checks take the standby out in ~2 s.
        wait_until(lambda: all(_ready(front) for _ in range(8)), 20, 0.2, "haproxy to settle")
        created = front.create_worker("behind-haproxy")
        agent = Agent(front.url, created["token"], tmp_path / "work", "behind-haproxy", True)
        agent.start()
        front.wait_worker(created["worker_id"], "idle")
        job = front.submit(config_name="steady", target="worker")
        front.wait_job(job["job_id"], {"running"}, timeout_s=30)
        first.kill()
        wait_role(second, "active", 10.0)
        done = wait_until(lambda: _ended(front, job["job_id"]), 90, 0.2, "the job to end")
        assert done["status"] == "completed", done
        assert done["attempts"] == 1  # the same run, never dispatched again
        first.start(wait_ready=False)
        assert role(first) == "standby"
        assert _ready(front)  # haproxy still sends everything to the new active one
    finally:
        if agent is not None:
            agent.stop()
        proxy.terminate()
        proxy.wait(timeout=10)


def _ready(front: Orchestrator) -> bool:
    try:
        return front.request("GET", "/readyz", token=None)["status"] == "ready"
    except (OSError, ApiError, ValueError):
        return False


def _ended(front: Orchestrator, job_id: str) -> dict[str, Any] | None:
    """The job once it ended; None meanwhile, or while haproxy has no server to offer."""
    try:
        job = front.job(job_id)
    except (OSError, ApiError, ValueError):
        return None
    return job if job["status"] in ("completed", "failed") else None
