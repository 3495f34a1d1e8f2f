"""The load generator's wire layer: raw asyncio protocols, no HTTP client library.

A full client session per simulated worker would cost the load generator more CPU and
memory than the orchestrator it measures; these protocols cost a few hundred bytes per
connection and a few tens of microseconds per request.

- ``HttpConnection``: one HTTP/1.1 keep-alive connection, one request in flight.
- ``HttpPool``: a bounded set of them; any worker's request may use any connection,
  because the protocol authenticates each request by its ``X-Worker-Token`` header.
- ``SseConnection``: one worker's ``GET /api/workers/stream``; it decodes the chunked
  body and hands each complete event to a callback, with no task per stream.
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Callable
from typing import Any

_CRLF = b"\r\n"
_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 64 * 1024


class HttpError(Exception):
    """A response that is not HTTP/1.1 as expected, or a connection lost mid-request."""


def build_request(
    method: str, path: str, host: str, body: Any = None, headers: dict[str, str] | None = None
) -> bytes:
    """The request's bytes; ``body`` (any JSON value) is sent as JSON."""
    payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """Status and lower-cased headers of a response head (without the blank line)."""
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HttpError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


class ChunkDecoder:
    """Incremental ``Transfer-Encoding: chunked`` decoder; ``done`` after the last chunk."""

    __slots__ = ("_buf", "_remaining", "done")

    def __init__(self) -> None:
        self._buf = b""
        self._remaining = -1  # -1: expecting a size line; -2: expecting the CRLF after data
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        out = bytearray()
        pos = 0
        while pos < len(buf) and not self.done:
            if self._remaining == -1:
                end = buf.find(_CRLF, pos)
                if end < 0:
                    break
                size = int(buf[pos:end].split(b";", 1)[0], 16)
                pos = end + 2
                if size == 0:
                    self.done = True
                    break
                self._remaining = size
            elif self._remaining == -2:
                if len(buf) - pos < 2:
                    break
                pos += 2
                self._remaining = -1
            else:
                take = min(self._remaining, len(buf) - pos)
                out += buf[pos : pos + take]
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._remaining = -2
        self._buf = buf[pos:]
        return bytes(out)


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection with one request in flight at a time."""

    __slots__ = ("_buf", "_chunks", "_head", "_length", "_waiter", "closed", "transport", "used")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.used = 0
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._buf = bytearray()
        self._head: tuple[int, dict[str, str]] | None = None
        self._length = -1
        self._chunks: ChunkDecoder | None = None

    @classmethod
    async def open(cls, host: str, port: int, local_host: str | None = None) -> HttpConnection:
        """Connect; from ``local_host`` when given (another loopback address, so a
        server's per-address bounds tell two clients on this machine apart)."""
        loop = asyncio.get_running_loop()
        local_addr = (local_host, 0) if local_host else None
        _, protocol = await loop.create_connection(cls, host, port, local_addr=local_addr)
        return protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(HttpError(f"connection lost mid-request: {exc!r}"))

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        """Send one request's bytes; (status, body) of its response."""
        if self.closed or self.transport is None:
            raise HttpError("connection is closed")
        self.used += 1
        self._waiter = asyncio.get_running_loop().create_future()
        self._buf.clear()
        self._head, self._length, self._chunks = None, -1, None
        self.transport.write(raw)
        return await self._waiter

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            return  # nothing asked for (the server closing an idle connection)
        if self._head is None:
            self._buf += data
            end = self._buf.find(_HEAD_END)
            if end < 0:
                if len(self._buf) > _MAX_HEAD:
                    self._fail(HttpError("response head too long"))
                return
            try:
                self._head = parse_head(bytes(self._buf[:end]))
            except (HttpError, ValueError) as error:
                self._fail(HttpError(str(error)))
                return
            data = bytes(self._buf[end + 4 :])
            self._buf.clear()
            headers = self._head[1]
            if headers.get("transfer-encoding", "").lower() == "chunked":
                self._chunks = ChunkDecoder()
            else:
                self._length = int(headers.get("content-length", "0"))
        if self._chunks is not None:
            self._buf += self._chunks.feed(data)
            if self._chunks.done:
                self._finish(bytes(self._buf))
            return
        self._buf += data
        if len(self._buf) >= self._length:
            self._finish(bytes(self._buf[: self._length]))

    def _finish(self, body: bytes) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done() and self._head is not None:
            waiter.set_result((self._head[0], body))

    def _fail(self, error: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)
        self.close()


class HttpPool:
    """At most ``size`` keep-alive connections; callers queue for a free one."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self.host, self.port, self.size = host, port, size
        self.host_header = f"{host}:{port}"
        self._idle: list[HttpConnection] = []
        self._open = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.requests = 0

    async def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """(status, decoded JSON body or None). One retry when a reused keep-alive
        connection turns out closed (the server may close idle ones)."""
        raw = build_request(method, path, self.host_header, body, headers)
        for attempt in (1, 2):
            conn = await self._acquire()
            reused = conn.used > 0
            try:
                status, payload = await conn.request(raw)
            except (HttpError, OSError):
                conn.close()
                self._release(conn)
                if attempt == 2 or not reused:
                    raise
                continue
            except asyncio.CancelledError:
                # A caller's timeout: the answer may still come, so the connection is
                # not reused, but its place in the pool is given back.
                conn.close()
                self._release(conn)
                raise
            self._release(conn)
            self.requests += 1
            return status, json.loads(payload) if payload else None
        raise HttpError("unreachable")

    async def _acquire(self) -> HttpConnection:
        while True:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn
                self._open -= 1
            if self._open < self.size:
                self._open += 1
                try:
                    return await HttpConnection.open(self.host, self.port)
                except OSError:
                    self._open -= 1
                    self._wake_one()
                    raise
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def _release(self, conn: HttpConnection) -> None:
        if conn.closed:
            self._open -= 1
        else:
            self._idle.append(conn)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()
        self._open = 0


SseCallback = Callable[["SseConnection", str, bytes, int | None], None]


class SseConnection(asyncio.Protocol):
    """One worker's event stream. ``on_event(conn, type, data, event_id)`` per event;
    ``opened`` resolves with the response status once the head has arrived."""

    __slots__ = (
        "_buf",
        "_chunks",
        "_events",
        "_request",
        "closed_at",
        "on_close",
        "on_event",
        "opened",
        "owner",
        "status",
        "transport",
    )

    def __init__(
        self,
        request: bytes,
        owner: Any,
        on_event: SseCallback,
        on_close: Callable[[SseConnection], None],
    ) -> None:
        self._request = request
        self.owner = owner
        self.on_event = on_event
        self.on_close = on_close
        self.transport: asyncio.Transport | None = None
        self.opened: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.status = 0
        self.closed_at: float | None = None
        self._buf = b""
        self._chunks = ChunkDecoder()
        self._events = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self._request)  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        loop = asyncio.get_running_loop()
        self.closed_at = loop.time()
        if not self.opened.done():
            self.opened.set_exception(HttpError(f"stream closed before its head: {exc!r}"))
        self.on_close(self)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.status == 0:
            self._buf += data
            end = self._buf.find(_HEAD_END)
            if end < 0:
                return
            try:
                self.status, headers = parse_head(self._buf[:end])
            except (HttpError, ValueError) as error:
                self.opened.set_exception(error)
                self.close()
                return
            data, self._buf = self._buf[end + 4 :], b""
            if not self.opened.done():
                self.opened.set_result(self.status)
            if self.status != 200:
                self.close()
                return
            if headers.get("transfer-encoding", "").lower() != "chunked":
                self._chunks.done = True  # a plain body: pass bytes through below
        decoded = data if self._chunks.done else self._chunks.feed(data)
        if not decoded:
            return
        self._events += decoded
        while True:
            end = self._events.find(b"\n\n")
            if end < 0:
                return
            block, self._events = self._events[:end], self._events[end + 2 :]
            self._dispatch(block)

    def _dispatch(self, block: bytes) -> None:
        kind, data, event_id = "message", b"", None
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                data = line[5:].lstrip()
            elif line.startswith(b"event:"):
                kind = line[6:].strip().decode()
            elif line.startswith(b"id:"):
                value = line[3:].strip()
                event_id = int(value) if value.isdigit() else None
        self.on_event(self, kind, data, event_id)


async def open_stream(
    host: str,
    port: int,
    request: bytes,
    owner: Any,
    on_event: SseCallback,
    on_close: Callable[[SseConnection], None],
) -> SseConnection:
    """Connect and send the stream request; await ``conn.opened`` for the status."""
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(
        lambda: SseConnection(request, owner, on_event, on_close), host, port
    )
    return conn
