"""Bound how long a worker's stream can look open after its machine vanished.

A machine that loses power or its network closes nothing: no FIN, no RST. The
orchestrator's pings then sit unacknowledged in the kernel's send buffer while TCP
retransmits them (about 15 minutes by default, tcp_retries2), and the stream looks open
all that time: the worker stays "connected" until the heartbeat timeout and a job
written to it waits out the acknowledgement timeout. The kernel can give up sooner:

- TCP_USER_TIMEOUT: data unacknowledged for ``dead_peer_timeout_s`` fails the
  connection (ETIMEDOUT). aiohttp-sse sets it from its ``send_timeout``, which the
  stream handler derives from the ping interval; the pings guarantee unacknowledged
  data at most one ping interval after the peer went;
- TCP keepalive (set here): probes a stream that has sent nothing for a ping interval,
  so a silent peer is found even if no write is pending (TCP_USER_TIMEOUT also decides
  when keepalive gives up, man 7 tcp).

The failed socket closes the transport, which tunefleet/http/stream_watch.py sees
within a quarter second; from there the closed-stream path (reconnect grace, requeue,
``connected: false``) takes over. A vanished worker is thus noticed within
three ping intervals (45 s by default) instead of the heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import socket

# How many ping intervals a stream may hold unacknowledged data before the kernel fails
# it. Two: a ping lost to a brief outage is retransmitted in time, not fatal.
UNACKED_PINGS = 2
# Keepalive probes sent before a silent peer counts as gone.
KEEPALIVE_PROBES = 4


def dead_peer_timeout_s(ping_interval_s: float) -> float:
    """How long a stream may hold unacknowledged data before the kernel fails it."""
    return UNACKED_PINGS * ping_interval_s


def bound_silent_peer(transport: asyncio.BaseTransport | None, ping_interval_s: float) -> bool:
    """Turn on keepalive probes after a ping interval of silence. False where that
    cannot be done (no TCP socket, as behind a Unix socket; a system without these
    options): the pings and the heartbeat timeout then remain the bound."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or not hasattr(socket, "TCP_KEEPIDLE"):
        return False
    idle_s = max(1, int(ping_interval_s))
    interval_s = max(1, int((dead_peer_timeout_s(ping_interval_s) - idle_s) / KEEPALIVE_PROBES))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)
    except OSError:
        return False
    return True
