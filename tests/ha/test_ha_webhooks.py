"""Webhooks across an HA takeover (issue 27): an event left undelivered by the active
orchestrator (its receiver was away) is sent by the standby once it takes over, and the
takeover itself is an event. PostgreSQL, two real orchestrator processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import wait_until, write_tiny_config
from tests.e2e.webhook_receiver import Receiver
from tests.ha.ha_cluster import Cluster, wait_role

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    write_tiny_config(tmp_path / "configs", "tiny")
    built = Cluster(tmp_path, pg_url, lease_s=1.0)
    try:
        yield built
    finally:
        built.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def test_the_new_active_one_sends_what_the_old_one_left_and_says_it_took_over(
    cluster: Cluster, receiver: Receiver
) -> None:
    first = cluster.add("a")
    second = cluster.add("b")
    for node in (first, second):
        node.extra_args.append("--webhooks-allow-private")
    first.start()
    second.start(wait_ready=False)
    events = ["job.submitted", "orchestrator.takeover"]
    first.request("POST", "/api/admin/webhooks", {"url": receiver.url, "events": events})
    job = first.submit(config_name="tiny", target="worker")  # no worker: it waits
    hook_log = "/api/admin/webhooks/1/deliveries"

    def tried() -> Any:
        found = first.request("GET", hook_log)["deliveries"]
        return found and found[0]["attempts"] >= 1

    wait_until(tried, 30, 0.1, "the first attempt to fail (the receiver is away)")
    first.kill()
    wait_role(second, "active", 10.0)
    receiver.up()

    def arrived() -> list[dict[str, Any]] | None:
        kinds = sorted(g["json"]["type"] for g in receiver.got)
        return receiver.got if kinds == sorted(events) else None

    got = wait_until(arrived, 60, 0.2, "the backlog and the takeover from the new active one")
    by_kind = {g["json"]["type"]: g["json"] for g in got}
    assert by_kind["job.submitted"]["data"]["job_id"] == job["job_id"]
    assert by_kind["orchestrator.takeover"]["data"]["url"] == second.url
    assert by_kind["orchestrator.takeover"]["orchestrator"] == second.url
