"""Serving the orchestrator's app: what ``web.run_app`` does, with the connection bounds
of issue 23 (finding 6), which ``run_app`` has no place for.

- the open-file soft limit is raised to the hard limit at start (1,024 is a common soft
  limit, and every connection is a file descriptor), and the start-up says so;
- connections go through ``GuardedAppRunner`` (tunefleet/http/connections.py): a cap per
  client address and a deadline for a request's headers;
- a failed accept (out of descriptors or memory) is logged at most once per interval
  with a count: asyncio logs each with a traceback, and a flood of them filled the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from tunefleet.http.connections import ConnectionGuard, GuardedAppRunner
from tunefleet.http.log_gate import LogGate

log = structlog.get_logger(__name__)

# What asyncio's accept reports, backs off for a second and retries.
ACCEPT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_ERROR_LOG_INTERVAL_S = 10.0
# run_app's defaults, which the orchestrator served with before.
KEEPALIVE_TIMEOUT_S = 75.0
SHUTDOWN_TIMEOUT_S = 10.0
# Connections the kernel queues before the loop accepts them (capped by net.core.somaxconn).
# aiohttp's 128 overflowed when a client re-opened hundreds of refused connections a
# second: everyone else's new connection lost its SYN and waited out the 1 s retransmit.
LISTEN_BACKLOG = 4096
# asyncio accepts up to its backlog argument in one callback; kept at aiohttp's 128 so a
# burst of connections is taken in slices, with heartbeats handled in between.
ACCEPT_BATCH = 128


def raise_open_file_limit() -> str:
    """Raise this process's soft limit on open files to its hard limit; one line saying
    what the limit now is, or why it could not be raised (never fatal)."""
    try:
        import resource
    except ImportError:  # not a Unix
        return "open files: the limit is not known on this system"

    def count(limit: int) -> str:
        return "unlimited" if limit == resource.RLIM_INFINITY else f"{limit:,}"

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return f"open files: up to {count(soft)} (the hard limit)"
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as error:
        return (
            f"open files: up to {count(soft)}; could not raise it to the hard limit "
            f"{count(hard)} ({error}); raise it with `ulimit -n` before starting"
        )
    return f"open files: up to {count(hard)} (raised from {count(soft)}, to the hard limit)"


def gate_accept_errors(
    loop: asyncio.AbstractEventLoop,
    guard: ConnectionGuard | None = None,
    interval_s: float = ACCEPT_ERROR_LOG_INTERVAL_S,
) -> None:
    """Log the loop's failed accepts once per ``interval_s`` with a count, not each with
    a traceback; count each in ``tunefleet_accept_errors_total``. Every other error goes
    to the handler that was there (or asyncio's default), as before."""
    previous = loop.get_exception_handler()
    gate = LogGate(interval_s)

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if isinstance(error, OSError) and error.errno in ACCEPT_ERRNOS and "socket" in context:
            if guard is not None and guard.metrics is not None:
                guard.metrics.accept_errors.inc()
            held = gate.passes()
            if held is not None:
                log.error(
                    "cannot accept new connections",
                    error=os.strerror(error.errno),
                    failed_since_last_line=held,
                    hint="asyncio retries each second; raise the open-file limit (ulimit -n) "
                    "or lower --max-connections-per-address",
                )
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)


async def serve(
    app: web.Application,
    guard: ConnectionGuard,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None,
    until: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Serve ``app`` on ``host:port`` until ``until()`` returns (default: never; SIGINT
    and SIGTERM end the process as ``run_app``'s do), then shut it down."""
    gate_accept_errors(asyncio.get_running_loop(), guard)
    runner = GuardedAppRunner(
        app,
        guard,
        handle_signals=until is None,
        access_log=None,
        keepalive_timeout=KEEPALIVE_TIMEOUT_S,
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context, backlog=ACCEPT_BATCH)
        await site.start()
        deepen_listen_queue(site, LISTEN_BACKLOG)
        await (until() if until is not None else asyncio.Event().wait())
    finally:
        await runner.cleanup()


def deepen_listen_queue(site: web.TCPSite, backlog: int) -> None:
    """Listen again with a deeper kernel queue: asyncio took its accept batch from the
    backlog it was given, and a second listen() only changes the queue."""
    server = site._server  # aiohttp keeps the asyncio server private
    for transport_socket in getattr(server, "sockets", None) or ():
        # asyncio hands out wrappers without listen(): a duplicate names the same socket.
        with socket.fromfd(
            transport_socket.fileno(), transport_socket.family, transport_socket.type
        ) as sock:
            sock.listen(backlog)


def run_guarded(
    app: web.Application,
    guard: ConnectionGuard,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None,
) -> None:
    """``serve`` in a new event loop, until SIGINT or SIGTERM (``run_app``'s way: a
    signal raises GracefulExit in the loop, and the app is shut down cleanly)."""
    with contextlib.suppress(web.GracefulExit, KeyboardInterrupt):
        asyncio.run(serve(app, guard, host, port, ssl_context))
