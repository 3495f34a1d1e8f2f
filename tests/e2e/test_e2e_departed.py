"""Workers that are gone: a real orchestrator process and bare-socket workers whose
streams close without a word, as a dead machine's or a dropped connection's would."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Orchestrator, wait_until, write_tiny_config
from tests.e2e.raw_stream import RawStreamWorker

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[Orchestrator]:
    configs = tmp_path / "configs"
    write_tiny_config(configs, "quick")
    # A long heartbeat timeout: what is tested here must happen long before it.
    orch = Orchestrator(tmp_path / "data", configs, heartbeat_timeout_s=120).start()
    yield orch
    orch.stop()


@pytest.fixture
def raw_workers() -> Iterator[list[RawStreamWorker]]:
    made: list[RawStreamWorker] = []
    yield made
    for worker in made:
        worker.close()


def connect_raw(
    orch: Orchestrator, made: list[RawStreamWorker], name: str, labels: dict[str, str] | None = None
) -> RawStreamWorker:
    created = orch.create_worker(name, labels=labels)
    worker = RawStreamWorker(orch.url, created["token"], created["worker_id"], name=name)
    made.append(worker)
    worker.register()
    worker.open_stream()
    wait_until(lambda: orch.worker(worker.worker_id)["connected"], 10, what=f"{name} connected")
    return worker


def test_a_closed_stream_is_noticed_within_a_second_and_its_worker_gets_no_job(
    orchestrator: Orchestrator, raw_workers: list[RawStreamWorker]
) -> None:
    departed = connect_raw(orchestrator, raw_workers, "departed")
    closed_at = time.monotonic()
    departed.close()
    wait_until(
        lambda: not orchestrator.worker(departed.worker_id)["connected"],
        5,
        0.05,
        "the orchestrator to notice the closed stream",
    )
    # Long before the ping interval (15 s) would have shown it.
    assert time.monotonic() - closed_at < 3.0
    snapshot = orchestrator.worker(departed.worker_id)
    assert snapshot["status"] == "idle"  # the seed's states: offline only at the timeout

    job = orchestrator.submit(config_name="quick", target="worker")
    assert job["status"] == "pending"
    reason = orchestrator.request("GET", f"/api/queue/position/{job['job_id']}")["reason"]
    assert reason == (
        f"matching worker {departed.worker_id} is not connected (registered, no open stream); "
        "the job starts when it connects"
    )

    present = connect_raw(orchestrator, raw_workers, "present")
    submitted = present.wait_event("job_submit")
    assert submitted["job_id"] == job["job_id"]
    assert orchestrator.job(job["job_id"])["worker_id"] == present.worker_id
