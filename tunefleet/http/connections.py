"""Bounds on connections, before a request exists (issue 23, finding 6).

A client that opens connections and never finishes a request's headers (or sends
nothing) held a file descriptor each until aiohttp's keep-alive timeout; enough of them
exhaust the process's descriptors and new clients, ``/healthz`` included, are not
accepted. Two bounds (tunefleet/limits.py):

- ``max_connections_per_address``: a client address past it has its new connection
  closed as it is made, before aiohttp parses a byte or starts a task for it;
- ``request_header_timeout_s``: a request's headers must arrive within it, counted from
  the connection's opening and, on a kept-alive connection, from the first byte of each
  next request. A connection waiting for its next request is governed by aiohttp's
  keep-alive timeout as before; a request whose headers arrived (its body streaming
  in, its SSE stream open for hours) is not timed here at all.

aiohttp has no option for either, so its protocol (``RequestHandler``) is subclassed:
one timer per connection, armed when headers are awaited and cancelled when they
arrive; a heartbeat that arrives whole costs one attribute check. Whether the handler
awaits a request is aiohttp's own ``_waiter`` (pending: no complete request yet).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from tunefleet.http import keys
from tunefleet.http.auth_throttle import client_key
from tunefleet.http.log_gate import LogGate
from tunefleet.limits import Limits
from tunefleet.metrics import Metrics

log = structlog.get_logger(__name__)

NOSNIFF_HEADER = "X-Content-Type-Options"


class ConnectionGuard:
    """Open connections per client address, and what was refused (counted in /metrics,
    logged at most once per ``log_interval_s``)."""

    def __init__(self, limits: Limits, log_interval_s: float = 10.0) -> None:
        self.max_per_address = limits.max_connections_per_address
        self.header_timeout_s = limits.request_header_timeout_s
        self.open_by_address: dict[str, int] = {}
        self.metrics: Metrics | None = None  # the app's, once it has started
        self._over_cap_log = LogGate(log_interval_s)
        self._timeout_log = LogGate(log_interval_s)

    def admit(self, address: str) -> bool:
        """Count a new connection from ``address``; False (not counted) past the cap."""
        cap = self.max_per_address
        if not cap:
            return True
        open_now = self.open_by_address.get(address, 0)
        if open_now >= cap:
            self._refused("address_cap")
            held = self._over_cap_log.passes()
            if held is not None:
                log.warning(
                    "connection refused: too many from one address",
                    client=address,
                    open=open_now,
                    cap=cap,
                    refused_since_last_line=held,
                    hint="raise --max-connections-per-address (0: no cap) if this client "
                    "is a proxy or a host running many workers",
                )
            return False
        self.open_by_address[address] = open_now + 1
        return True

    def release(self, address: str) -> None:
        if not self.max_per_address:
            return
        left = self.open_by_address.get(address, 0) - 1
        if left > 0:
            self.open_by_address[address] = left
        else:
            self.open_by_address.pop(address, None)

    def headers_too_slow(self, address: str) -> None:
        self._refused("header_timeout")
        held = self._timeout_log.passes()
        if held is not None:
            log.info(
                "connection closed: no request headers in time",
                client=address,
                timeout_s=self.header_timeout_s,
                closed_since_last_line=held,
            )

    def _refused(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.connections_refused.labels(reason=reason).inc()


def _peer_host(transport: asyncio.BaseTransport) -> str:
    """The address the client is counted under, as failed sign-ins are (an IPv4-mapped
    IPv6 address as IPv4, other IPv6 by its /64); '' when there is none (a Unix socket)."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, (tuple, list)) and peer:
        return client_key(str(peer[0]))
    return ""


def free_closed_transport(transport: asyncio.BaseTransport | None) -> None:
    """Break the reference cycle a closed connection's transport is left in, so it is
    freed at once rather than by the cyclic collector. CPython 3.11's selector transport
    keeps a bound method of itself (``_read_ready_cb``) after closing; at 900 connections
    a second (bench abuse f) collecting them stalled the loop 3 to 17 ms about once a
    second, and heartbeats waited behind it. Other transports have no such attribute."""
    if transport is not None and getattr(transport, "_read_ready_cb", None) is not None:
        transport._read_ready_cb = None  # type: ignore[attr-defined]


class GuardedRequestHandler(RequestHandler):
    """aiohttp's protocol, with the per-address cap and the header deadline."""

    __slots__ = ("_counted", "_guard", "_header_timer", "_peer", "_refused", "_transport")

    def __init__(self, manager: web.Server, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._peer = ""
        self._counted = False
        self._refused = False
        self._header_timer: asyncio.TimerHandle | None = None
        # aiohttp lets go of its transport when it closes it; freed here once lost.
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        peer = _peer_host(transport)
        if peer and not self._guard.admit(peer):
            # aiohttp never sees it: no parser fed, no task started.
            self._refused = True
            self._parser = None  # it points back here: freed now, not by the collector
            cast(asyncio.Transport, transport).abort()
            return
        self._peer, self._counted = peer, bool(peer)
        super().connection_made(transport)
        self._await_headers()

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._refused:  # else aiohttp was never told of it
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            if self._counted:
                self._counted = False
                self._guard.release(self._peer)
            super().connection_lost(exc)
        free_closed_transport(self._transport)
        self._transport = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        waiter = self._waiter
        if waiter is None:
            return  # a request is being handled: these are its body's bytes, or a next one's
        if waiter.done():  # a request's headers are in
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
        elif self._header_timer is None:  # the first bytes of a next request
            self._await_headers()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """aiohttp's own answer to a request it could not parse or run, which never
        reaches the app's prepare hook: nosniff on it too, as on every response."""
        response = super().handle_error(request, status, exc, message)
        response.headers[NOSNIFF_HEADER] = "nosniff"
        return response

    def _await_headers(self) -> None:
        self._header_timer = self._loop.call_later(
            self._guard.header_timeout_s, self._header_deadline_passed
        )

    def _header_deadline_passed(self) -> None:
        self._header_timer = None
        waiter = self._waiter
        if self.transport is None or waiter is None or waiter.done():
            return  # the headers came (or the connection went) in time
        self._guard.headers_too_slow(self._peer)
        self.force_close()


class GuardedServer(web.Server):
    """aiohttp's low-level server making ``GuardedRequestHandler``s."""

    def __init__(self, guard: ConnectionGuard, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard

    def __call__(self) -> RequestHandler:
        return GuardedRequestHandler(self, self.guard, loop=self._loop, **self._kwargs)


class GuardedAppRunner(web.AppRunner):
    """``web.AppRunner`` whose server guards its connections. aiohttp builds its server
    once the app has started; this builds the same server with the guard (the protocol
    options, keep-alive timeout and access log among them, passed on as given)."""

    def __init__(self, app: web.Application, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.guard = guard

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()
        self.guard.metrics = self.app.get(keys.METRICS)
        return GuardedServer(
            self.guard,
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            **plain._kwargs,
        )
