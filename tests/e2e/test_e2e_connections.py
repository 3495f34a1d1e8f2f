"""End to end, the connection bounds of issue 23 (finding 6) as `tunefleet server` applies
them: its flags reach the listening socket, the start-up says the open-file limit, and
SIGTERM still ends it cleanly."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.e2e.harness import ApiError, Orchestrator, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def closed_unanswered(sock: socket.socket) -> bool:
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def healthy(orch: Orchestrator) -> bool:
    try:
        return bool(orch.request("GET", "/healthz", token=None))
    except (OSError, ApiError):
        return False


def test_the_server_caps_connections_per_address_and_says_its_open_file_limit(
    tmp_path: Path,
) -> None:
    args = ["--max-connections-per-address", "3", "--request-header-timeout", "30"]
    orch = Orchestrator(tmp_path / "data", tmp_path / "configs", extra_args=args).start()
    try:
        assert "open files: up to " in orch.log()
        held = [socket.create_connection(("127.0.0.1", orch.port)) for _ in range(3)]
        time.sleep(0.2)  # the server takes them
        with socket.create_connection(("127.0.0.1", orch.port)) as fourth:
            assert closed_unanswered(fourth)
        for sock in held:
            sock.close()
        wait_until(lambda: healthy(orch), timeout_s=10, what="/healthz once the three closed")
    finally:
        orch.stop()
    assert orch.process is not None and orch.process.returncode == 0
    assert "Traceback" not in orch.log()
