"""A worker machine that vanishes without closing its socket (power loss, a cut cable:
no FIN, no RST). The orchestrator's kernel fails the stream's socket once its pings go
unacknowledged for two ping intervals (TCP_USER_TIMEOUT, tunefleet/http/stream_socket.py),
so the worker shows ``connected: false`` and the job it never acknowledged is pending
again long before the heartbeat timeout (120 s) or the acknowledgement timeout (60 s).

And the other way round: an agent whose orchestrator went silent treats its stream as
lost after --stream-timeout, not after TCP's retransmissions.

A real orchestrator process; the worker (a bare-socket client, or a real agent) is in
its own network namespace, whose veth link is taken down to cut it off silently.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.chaos_agent import ChaosAgent
from tests.chaos.chaos_netns import NetnsLink, NetnsPool, ip
from tests.e2e.harness import Orchestrator, wait_until, write_tiny_config

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]

PING_S = 1.0
GRACE_S = 1.0
WORKER_MODULE = "tests.chaos.silent_peer_worker"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def link(netns_unavailable: str | None) -> Iterator[NetnsLink]:
    if netns_unavailable is not None:
        pytest.skip(f"a silent network cut needs a network namespace: {netns_unavailable}")
    pool = NetnsPool(1, tag="s")
    try:
        yield pool.create()[0]
    finally:
        pool.close()


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[Orchestrator]:
    configs = tmp_path / "configs"
    write_tiny_config(configs, "quick")
    orch = Orchestrator(
        tmp_path / "data",
        configs,
        heartbeat_timeout_s=120,
        extra_args=[
            "--host",
            "0.0.0.0",
            "--ping-interval",
            str(PING_S),
            "--reconnect-grace",
            str(GRACE_S),
            "--dispatch-ack-timeout",
            "60",
        ],
    ).start()
    yield orch
    orch.stop()


def test_a_worker_cut_off_silently_is_disconnected_and_its_job_requeued_within_the_bound(
    orchestrator: Orchestrator, link: NetnsLink
) -> None:
    created = orchestrator.create_worker("silent")
    worker_id = created["worker_id"]
    url = f"http://{link.host_addr}:{orchestrator.port}"
    peer = subprocess.Popen(
        [
            *link.exec_prefix(),
            sys.executable,
            "-m",
            WORKER_MODULE,
            url,
            created["token"],
            worker_id,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _next_line(peer)["type"] == "stream_open"
        wait_until(lambda: orchestrator.worker(worker_id)["connected"], 10, what="connected")
        job_id = orchestrator.submit(config_name="quick", target="worker")["job_id"]
        event = _next_line(peer)
        assert (event["type"], event["job_id"]) == ("job_submit", job_id)

        _cut_silently(link)
        cut_at = time.monotonic()
        wait_until(
            lambda: not orchestrator.worker(worker_id)["connected"],
            30,
            0.1,
            "the orchestrator to notice the silent worker",
        )
        noticed_s = time.monotonic() - cut_at
        orchestrator.wait_job(job_id, {"pending"}, timeout_s=10)
        requeued_s = time.monotonic() - cut_at
        print(
            f"silent peer: disconnected after {noticed_s:.1f} s, requeued after {requeued_s:.1f} s"
        )
        # The bound: a ping interval for a ping to be unacknowledged, two for the kernel to
        # give up (TCP_USER_TIMEOUT), then the grace; with slack for a loaded machine, and
        # far below the heartbeat (120 s) and acknowledgement (60 s) timeouts.
        assert noticed_s < 3 * PING_S + 10
        assert requeued_s < 3 * PING_S + GRACE_S + 10
        job = orchestrator.job(job_id)
        assert job["attempt_history"][0]["outcome"] == "undelivered"
        assert orchestrator.worker(worker_id)["status"] == "idle"  # offline only at 120 s
    finally:
        peer.kill()
        peer.wait(10)


def _next_line(peer: subprocess.Popen[str], timeout_s: float = 15.0) -> dict[str, Any]:
    """The in-namespace worker's next printed event."""
    assert peer.stdout is not None
    ready, _, _ = select.select([peer.stdout], [], [], timeout_s)
    line = peer.stdout.readline() if ready else ""
    if not line:
        peer.kill()
        _, err = peer.communicate(timeout=10)
        raise AssertionError(f"the worker in the namespace printed nothing: {err[-2000:]}")
    return json.loads(line)  # type: ignore[no-any-return]


def _cut_silently(link: NetnsLink) -> None:
    """Take the worker's end of the link down, inside its namespace: the orchestrator's
    route to it stays, its packets are dropped on the way (as a vanished machine's are
    somewhere past the gateway), and the worker's socket stays open without a FIN or
    RST. (Taking the host end down instead would remove the route, which no remote
    machine's vanishing does.)"""
    ip("netns", "exec", link.name, "ip", "link", "set", link.agent_if, "down")
    link.is_up = False


def test_an_agent_cut_off_from_its_orchestrator_notices_the_silence(
    orchestrator: Orchestrator, link: NetnsLink, tmp_path: Path
) -> None:
    """The other side: the orchestrator's machine vanishes for the agent. Its pings stop
    arriving (nothing is closed), and the agent's --stream-timeout treats the stream as
    lost instead of waiting on TCP."""
    created = orchestrator.create_worker("cut-off")
    agent = ChaosAgent(
        f"http://{link.host_addr}:{orchestrator.port}",
        created["token"],
        tmp_path / "work",
        "cut-off",
        persistent=True,
        extra_args=["--stream-timeout", "3"],  # above three of the 1 s ping intervals
        worker_id=created["worker_id"],
        netns=link,
    ).start()
    try:
        orchestrator.wait_worker(created["worker_id"], "idle")
        time.sleep(4)  # pings keep a quiet stream alive past the timeout
        assert "no event or ping" not in agent.log()
        _cut_silently(link)
        cut_at = time.monotonic()
        wait_until(
            lambda: "no event or ping on the job stream for 3 s" in agent.log(),
            20,
            0.1,
            "the agent to notice the silent orchestrator",
        )
        print(f"silent orchestrator: the agent noticed after {time.monotonic() - cut_at:.1f} s")
    finally:
        agent.stop()
