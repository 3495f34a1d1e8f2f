"""Two orchestrator processes on one PostgreSQL database: one active, one standing by
and answering honestly; kill -9 the active one and the standby takes over with the data;
pause the active one past its lease and it can no longer write and steps down."""

from __future__ import annotations

import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import ApiError, wait_until, write_tiny_config
from tests.ha.ha_cluster import Cluster, health, refusal, role, wait_role

pytestmark = [pytest.mark.postgres, pytest.mark.e2e]


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Any:
    write_tiny_config(tmp_path / "configs", "tiny")
    write_tiny_config(tmp_path / "configs", "written-by-old-term")
    built = Cluster(tmp_path, pg_url, lease_s=1.0)
    try:
        yield built
    finally:
        built.stop()


def test_the_standby_answers_503_naming_the_active_one(cluster: Cluster) -> None:
    active = cluster.add("a").start()
    standby = cluster.add("b").start(wait_ready=False)
    assert health(active)["role"] == "active" and health(active)["term"] == 1
    assert health(standby) == {
        "status": "ok",
        "role": "standby",
        "term": None,
        "active_url": active.url,
    }
    ready = refusal(standby, "GET", "/readyz")
    assert ready["status"] == "standby" and ready["active_url"] == active.url
    for method, path, body in [
        ("GET", "/api/queue", None),
        ("POST", "/api/queue/submit", {"config_name": "x"}),
        ("POST", "/api/workers/register", {"name": "w"}),
        ("GET", "/api/admin/workers", None),
    ]:
        answer = refusal(standby, method, path, body)
        assert answer["detail"] == (
            f"this orchestrator is a standby; the active orchestrator is at {active.url}: "
            "send requests there"
        )
        assert answer["active_url"] == active.url
    # A browser opening the standby's UI is sent to the active one's.
    opener = urllib.request.build_opener(_NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as redirected:
        opener.open(f"{standby.url}/?view=queue", timeout=10)
    assert redirected.value.code == 307
    assert redirected.value.headers["Location"] == f"{active.url}/?view=queue"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_kill_9_of_the_active_one_the_standby_takes_over_with_the_data(
    cluster: Cluster,
) -> None:
    first = cluster.add("a").start()
    second = cluster.add("b").start(wait_ready=False)
    worker = first.create_worker("kept")
    job = first.submit(config_name="tiny", target="worker")
    first.kill()
    took = wait_role(second, "active", 10.0)
    assert took < 10.0
    assert health(second)["term"] == 2
    wait_until(second._ready, 10, 0.05, "the new active to be ready")
    assert second.worker(worker["worker_id"])["name"] == "kept"
    assert second.job(job["job_id"])["status"] == "pending"
    # The old one comes back as a standby naming the new active one.
    first.start(wait_ready=False)
    assert health(first)["role"] == "standby"
    assert refusal(first, "GET", "/api/queue")["active_url"] == second.url


def test_a_graceful_stop_hands_over_at_once(cluster: Cluster) -> None:
    first = cluster.add("a").start()
    second = cluster.add("b").start(wait_ready=False)
    first.stop()
    assert wait_role(second, "active", 5.0) < 1.0 + 0.5  # no lease to wait out


def test_an_active_one_paused_past_its_lease_cannot_write_and_steps_down(
    cluster: Cluster,
) -> None:
    first = cluster.add("a").start()
    second = cluster.add("b").start(wait_ready=False)
    assert first.process is not None
    first.process.send_signal(signal.SIGSTOP)
    answers: list[Any] = []

    def submit_to_paused() -> None:  # served, if at all, only after the resume
        try:
            answers.append(first.submit(config_name="written-by-old-term", target="worker"))
        except (ApiError, OSError) as error:
            answers.append(error)

    sender = threading.Thread(target=submit_to_paused)
    sender.start()
    try:
        wait_role(second, "active", 10.0)
        wait_until(second._ready, 10, 0.05, "the new active to be ready")
    finally:
        first.process.send_signal(signal.SIGCONT)
    assert first.process.wait(timeout=15) == 3
    sender.join(timeout=15)
    assert answers and not isinstance(answers[0], dict), answers
    assert "stepping down" in first.log()
    jobs = second.request("GET", "/api/queue?limit=100")["jobs"]
    assert [j for j in jobs if j.get("config_name") == "written-by-old-term"] == []
    assert role(second) == "active"
    time.sleep(1.5)  # the new active keeps its lease: the old one took nothing back
    assert health(second)["term"] == 2
