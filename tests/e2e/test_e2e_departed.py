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

GRACE_S = 2.0


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[Orchestrator]:
    configs = tmp_path / "configs"
    write_tiny_config(configs, "quick")
    # A long heartbeat timeout: what is tested here must happen long before it, and
    # before the acknowledgement timeout (10 s here) too.
    orch = Orchestrator(
        tmp_path / "data",
        configs,
        heartbeat_timeout_s=120,
        extra_args=["--reconnect-grace", str(GRACE_S)],
    ).start()
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


def test_a_job_written_into_a_closing_stream_is_pending_again_within_seconds(
    orchestrator: Orchestrator, raw_workers: list[RawStreamWorker]
) -> None:
    departing = connect_raw(orchestrator, raw_workers, "departing")
    job_id = orchestrator.submit(config_name="quick", target="worker")["job_id"]
    assert departing.wait_event("job_submit")["job_id"] == job_id
    closed_at = time.monotonic()
    departing.close()  # before acknowledging: nobody will run it there
    orchestrator.wait_job(job_id, {"pending"}, timeout_s=GRACE_S + 5)
    # Long before the acknowledgement timeout (10 s here, 60 s by default).
    assert time.monotonic() - closed_at < 9.0
    detail = orchestrator.job(job_id)
    assert detail["attempt_history"][0]["outcome"] == "undelivered"

    fresh = connect_raw(orchestrator, raw_workers, "fresh")
    submitted = fresh.wait_event("job_submit")
    assert (submitted["job_id"], submitted["attempt"]) == (job_id, 2)
    assert fresh.report(job_id, "starting", attempt=2) == 200
    assert fresh.report(job_id, "completed", attempt=2) == 200
    assert orchestrator.wait_job(job_id, {"completed"})["status"] == "completed"


def test_a_worker_back_within_the_grace_keeps_its_job(
    orchestrator: Orchestrator, raw_workers: list[RawStreamWorker]
) -> None:
    worker = connect_raw(orchestrator, raw_workers, "blip")
    job_id = orchestrator.submit(config_name="quick", target="worker")["job_id"]
    assert worker.wait_event("job_submit")["job_id"] == job_id
    worker.close()
    time.sleep(GRACE_S / 4)  # a network blip, shorter than the grace
    reply = worker.register(current_job_id=job_id)
    assert reply["resume_job"]["job_id"] == job_id
    worker.open_stream(worker.last_event_id)
    time.sleep(GRACE_S * 2)
    job = orchestrator.job(job_id)
    assert (job["status"], job["worker_id"]) == ("dispatched", worker.worker_id)
    assert worker.report(job_id, "starting", attempt=1) == 200
    assert worker.report(job_id, "completed", attempt=1) == 200
    assert orchestrator.wait_job(job_id, {"completed"})["status"] == "completed"


def test_a_worker_back_after_the_grace_does_not_run_the_job_twice(
    orchestrator: Orchestrator, raw_workers: list[RawStreamWorker]
) -> None:
    late = connect_raw(orchestrator, raw_workers, "late")
    job_id = orchestrator.submit(config_name="quick", target="worker")["job_id"]
    assert late.wait_event("job_submit")["job_id"] == job_id
    late.close()
    orchestrator.wait_job(job_id, {"pending"}, timeout_s=GRACE_S + 5)
    other = connect_raw(orchestrator, raw_workers, "other")
    assert other.wait_event("job_submit")["job_id"] == job_id

    # The late worker had the job_submit and comes back with it: it is fenced off.
    reply = late.register(current_job_id=job_id)
    assert reply["abandon_job"] == job_id and reply["resume_job"] is None
    late.open_stream(late.last_event_id)
    assert late.report(job_id, "starting", attempt=1) == 409
    assert late.next_event(timeout_s=1.0) is None  # and it is not sent the job again
    assert other.report(job_id, "starting", attempt=2) == 200
    assert other.report(job_id, "completed", attempt=2) == 200
    job = orchestrator.wait_job(job_id, {"completed"})
    assert [a["outcome"] for a in job["attempt_history"]] == ["undelivered", "completed"]
    assert job["worker_id"] == other.worker_id
