"""Webhooks end to end (issue 27): a real orchestrator (--webhooks-allow-private) and a
real agent; a receiver on 127.0.0.1 records deliveries. A job's life arrives in order
with valid signatures; the receiver is down for a while and the orchestrator restarts
meanwhile: every event still arrives, none twice per idempotency id."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Agent, Orchestrator, wait_until, write_tiny_config
from tests.e2e.webhook_receiver import Receiver
from tunefleet.webhooks.signing import verify

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

JOB_EVENTS = ["job.submitted", "job.started", "job.completed"]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    found.up()
    yield found
    found.close()


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[Orchestrator]:
    configs = tmp_path / "configs"
    write_tiny_config(configs, "quick", max_train_steps=10, step_seconds=0.02)
    orch = Orchestrator(tmp_path / "data", configs, extra_args=["--webhooks-allow-private"])
    orch.start()
    yield orch
    orch.stop()


def _arrived(receiver: Receiver, job_id: str, kinds: list[str]) -> list[dict[str, Any]] | None:
    found = receiver.events_of(job_id)
    return found if sorted(g["json"]["type"] for g in found) == sorted(kinds) else None


def test_a_jobs_life_arrives_signed_in_order_and_nothing_is_lost_across_a_restart(
    orchestrator: Orchestrator, receiver: Receiver, tmp_path: Path
) -> None:
    orch = orchestrator
    hook = orch.request("POST", "/api/admin/webhooks", {"url": receiver.url, "events": JOB_EVENTS})
    created = orch.create_worker("gpu-worker-1")
    agent = Agent(orch.url, created["token"], tmp_path / "work", "gpu-worker-1", persistent=True)
    agent.start()
    try:
        orch.wait_worker(created["worker_id"], "idle")
        # 1. A job's life, in order, each delivery signed with the subscription's secret.
        first = orch.submit(config_name="quick", target="worker", name="tiny-example")["job_id"]
        assert orch.wait_job(first, {"completed", "failed"})["status"] == "completed"
        life = wait_until(lambda: _arrived(receiver, first, JOB_EVENTS), 30, 0.1, "the life")
        assert [g["json"]["type"] for g in life] == JOB_EVENTS
        for got in life:
            headers = got["headers"]
            signed = headers["X-Tunefleet-Signature"]
            assert verify(hook["secret"], signed, got["raw"], time.time())
            assert not verify("whsec_not-the-secret-at-all", signed, got["raw"], time.time())
            assert headers["X-Tunefleet-Event"] == got["json"]["type"]
        done = life[-1]["json"]["data"]
        assert (done["status"], done["worker_name"]) == ("completed", "gpu-worker-1")
        assert done["final_metrics"] and done["duration_s"] >= 0
        assert done["links"]["job"] == f"{orch.url}/#/jobs/{first}"
        # 2. The receiver goes away; a second job runs meanwhile; its events wait.
        receiver.down()
        second = orch.submit(config_name="quick", target="worker")["job_id"]
        assert orch.wait_job(second, {"completed", "failed"})["status"] == "completed"

        def tried() -> bool:
            log = orch.request("GET", f"/api/admin/webhooks/{hook['id']}/deliveries")
            waiting = [d for d in log["deliveries"] if d["state"] == "pending"]
            return len(waiting) == 3 and all(d["attempts"] >= 1 for d in waiting)

        wait_until(tried, 30, 0.2, "three failed attempts logged")
        # 3. The orchestrator restarts, then the receiver comes back: all of it arrives.
        orch.stop()
        orch.start()
        receiver.up()
        wait_until(lambda: _arrived(receiver, second, JOB_EVENTS), 60, 0.2, "the backlog")
        ids = [g["headers"]["X-Tunefleet-Delivery"] for g in receiver.got]
        assert len(ids) == len(set(ids)) == 6, ids
        log = orch.request("GET", f"/api/admin/webhooks/{hook['id']}/deliveries")
        assert {d["state"] for d in log["deliveries"]} == {"delivered"}
        retried = [d for d in log["deliveries"] if d["attempts"] > 1]
        assert len(retried) == 3 and all(d["log"][0]["status_code"] is None for d in retried)
    finally:
        agent.stop()
