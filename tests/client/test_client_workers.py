"""``Client.quarantine`` and ``Client.release`` against a real orchestrator: the answer,
the worker's listing, and the orchestrator's refusals as typed errors (404, 409)."""

from __future__ import annotations

import pytest

from tests.e2e.harness import Orchestrator
from tunefleet.client import Client, Conflict, NotFound

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_quarantine_and_release_a_worker(tf: Client, orchestrator: Orchestrator) -> None:
    # A worker of its own (no agent): the session's agent keeps taking jobs.
    worker_id = orchestrator.create_worker("client-quarantined")["worker_id"]
    held = tf.quarantine(worker_id, reason="ECC errors on GPU 0")
    assert held["success"] and held["worker_id"] == worker_id
    assert held["quarantined"] and held["quarantine_reason"] == "ECC errors on GPU 0"
    listed = next(w for w in tf.workers() if w["id"] == worker_id)
    assert listed["quarantined"] and listed["quarantine_reason"] == "ECC errors on GPU 0"

    with pytest.raises(Conflict) as again:
        tf.quarantine(worker_id)
    assert again.value.status == 409 and "already quarantined" in again.value.detail

    released = tf.release(worker_id)
    assert not released["quarantined"] and released["quarantine_reason"] is None
    with pytest.raises(Conflict) as twice:
        tf.release(worker_id)
    assert "not quarantined" in twice.value.detail

    # Without a reason, the orchestrator names who did it.
    assert tf.quarantine(worker_id)["quarantine_reason"].startswith("quarantined by ")
    tf.release(worker_id)


def test_quarantine_of_an_unknown_worker_is_not_found(tf: Client) -> None:
    with pytest.raises(NotFound) as missing:
        tf.quarantine("w_nope")
    assert missing.value.status == 404
    with pytest.raises(NotFound):
        tf.release("w_nope")
