"""The dead-peer bound of a worker stream's socket (tunefleet/http/stream_socket.py)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from tunefleet.http.stream_socket import bound_silent_peer, dead_peer_timeout_s


class _Transport:
    def __init__(self, sock: Any) -> None:
        self.sock = sock

    def get_extra_info(self, name: str) -> Any:
        return self.sock if name == "socket" else None


def test_the_bound_is_two_ping_intervals() -> None:
    assert dead_peer_timeout_s(15.0) == 30.0


@pytest.mark.skipif(not hasattr(socket, "TCP_KEEPIDLE"), reason="no TCP_KEEPIDLE here")
def test_a_tcp_socket_gets_keepalive_after_a_ping_interval() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        assert bound_silent_peer(_Transport(sock), 15.0)  # type: ignore[arg-type]
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 15


def test_no_tcp_socket_means_no_bound_and_no_error() -> None:
    assert not bound_silent_peer(None, 15.0)
    assert not bound_silent_peer(_Transport(None), 15.0)  # type: ignore[arg-type]
    left, right = socket.socketpair()  # a Unix socket: no TCP options to set
    with left, right:
        assert not bound_silent_peer(_Transport(left), 15.0)  # type: ignore[arg-type]
