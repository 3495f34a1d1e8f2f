"""Issue 23, finding 6, at small scale on a real listening orchestrator (in-process, on
loopback): a cap on connections per client address, a deadline for a request's headers
that spares bodies, streams and idle kept-alive connections, accept errors logged once
per interval, and the open-file limit raised at start."""

from __future__ import annotations

import asyncio
import asyncio.constants as asyncio_constants
import errno
import gc
import resource
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from structlog.testing import capture_logs

from tests.e2e.harness import free_port
from tests.server.conftest import ADMIN_TOKEN, options_for
from tests.server.protocol import eventually
from tunefleet.http import connections, serving
from tunefleet.http.app import build_app
from tunefleet.http.connections import ConnectionGuard, GuardedRequestHandler
from tunefleet.limits import Limits

HEADERS = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"p" * 40 + b"\r\n\r\n"


async def slow_stream(request: web.Request) -> web.StreamResponse:
    """Five chunks 0.3 s apart: a response that lasts past a 1 s header deadline."""
    response = web.StreamResponse()
    await response.prepare(request)
    for index in range(5):
        await asyncio.sleep(0.3)
        await response.write(b"%d" % index)
    return response


async def echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read())


@asynccontextmanager
async def orchestrator(tmp_path: Path, **bounds: Any) -> AsyncIterator[tuple[str, web.Application]]:
    """The orchestrator's app served as ``tunefleet server`` serves it, with ``bounds``."""
    options = options_for(tmp_path, limits=Limits(**bounds))
    app = build_app(options)
    app.router.add_get("/test/slow", slow_stream)
    app.router.add_post("/test/echo", echo)
    port = free_port()
    stop = asyncio.Event()
    guard = ConnectionGuard(options.limits)
    task = asyncio.create_task(serving.serve(app, guard, "127.0.0.1", port, None, stop.wait))
    base = f"http://127.0.0.1:{port}"
    try:
        await eventually(lambda: answers(base), "the orchestrator to listen")
        yield base, app
    finally:
        stop.set()
        await task


async def answers(base: str) -> bool:
    try:
        async with aiohttp.ClientSession() as session, session.get(f"{base}/healthz") as resp:
            return resp.status == 200
    except aiohttp.ClientError:
        return False


async def is_closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed this connection (EOF or reset), without an answer."""
    try:
        return await asyncio.wait_for(reader.read(1), timeout=10) == b""
    except ConnectionResetError:
        return True


async def connect(base: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    port = int(base.rsplit(":", 1)[1])
    return await asyncio.open_connection("127.0.0.1", port)


async def refused_total(base: str, reason: str) -> float:
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        async with session.get(f"{base}/metrics", headers=headers) as resp:
            text = await resp.text()
    name = f'tunefleet_connections_refused_total{{reason="{reason}"}} '
    lines = [line for line in text.splitlines() if line.startswith(name)]
    return float(lines[0].split()[-1]) if lines else 0.0


# --- the listen queue ------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read a backlog")
async def test_the_kernel_queues_a_burst_of_connections_deeper_than_aiohttps_128(
    tmp_path: Path,
) -> None:
    """A client re-opening hundreds of refused connections a second overflowed aiohttp's
    128: other clients' SYNs were dropped and waited out the 1 s retransmit (bench abuse's
    API GET p99 under trickling connections: 1,046 ms)."""
    async with orchestrator(tmp_path) as (base, _app):
        listing = await asyncio.to_thread(_listening, int(base.rsplit(":", 1)[1]))
        somaxconn = await asyncio.to_thread(Path("/proc/sys/net/core/somaxconn").read_text)
        # A listening socket's Send-Q is its backlog (the kernel caps it at somaxconn).
        assert int(listing[2]) == min(serving.LISTEN_BACKLOG, int(somaxconn)) > 128


def _listening(port: int) -> list[str]:
    command = ["ss", "-Hltn", f"sport = :{port}"]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()


# --- the cap per address ------------------------------------------------------------------


async def test_past_the_cap_a_new_connection_is_closed_and_the_address_is_served_again(
    tmp_path: Path,
) -> None:
    async with orchestrator(tmp_path, max_connections_per_address=5) as (base, _app):
        held = [await connect(base) for _ in range(5)]
        await asyncio.sleep(0.1)  # the server has taken them (same loop)
        reader, writer = await connect(base)
        writer.write(HEADERS)
        assert await is_closed(reader)  # no answer: closed as it was made
        writer.close()
        assert not await answers(base)  # still five held: /healthz is refused too
        for _, held_writer in held:
            held_writer.close()
        await eventually(lambda: answers(base), "/healthz once the five are closed")
        assert await refused_total(base, "address_cap") >= 2


class _Peer(asyncio.BaseTransport):
    def __init__(self, peer: object) -> None:
        super().__init__()
        self._peer = peer

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._peer if name == "peername" else default


@pytest.mark.parametrize(
    ("peer", "counted_as"),
    [
        (("127.0.0.1", 5000), "127.0.0.1"),
        # A dual-stack listener sees IPv4 clients as mapped IPv6: one address, one cap.
        (("::ffff:127.0.0.1", 5000, 0, 0), "127.0.0.1"),
        # One host holds a whole /64: an address each would be no cap at all.
        (("2001:db8::1", 5000, 0, 0), "2001:db8::/64"),
        (("2001:db8::2", 5000, 0, 0), "2001:db8::/64"),
        ("/run/tunefleet.sock", ""),  # a Unix socket: not capped
    ],
)
def test_connections_are_counted_by_address_as_failed_sign_ins_are(
    peer: object, counted_as: str
) -> None:
    assert connections._peer_host(_Peer(peer)) == counted_as


async def test_no_cap_with_zero(tmp_path: Path) -> None:
    async with orchestrator(tmp_path, max_connections_per_address=0) as (base, _app):
        held = [await connect(base) for _ in range(20)]
        assert await answers(base)
        for _, writer in held:
            writer.close()
        assert await refused_total(base, "address_cap") == 0


# --- the header deadline ------------------------------------------------------------------


async def test_a_trickle_of_header_bytes_is_closed_at_the_deadline(tmp_path: Path) -> None:
    async with orchestrator(tmp_path, request_header_timeout_s=1.0) as (base, _app):
        reader, writer = await connect(base)
        closed = False
        for byte in HEADERS:  # 0.2 s a byte: 20 s for the whole, bounded
            writer.write(bytes([byte]))
            await asyncio.sleep(0.2)
            if reader.at_eof() or writer.is_closing():
                break
            try:
                await writer.drain()
            except ConnectionError:
                closed = True
                break
        closed = closed or await is_closed(reader)
        writer.close()
        assert closed
        assert await refused_total(base, "header_timeout") == 1


async def test_a_silent_connection_is_closed_at_the_deadline(tmp_path: Path) -> None:
    async with orchestrator(tmp_path, request_header_timeout_s=1.0) as (base, _app):
        reader, writer = await connect(base)
        assert await is_closed(reader)
        writer.close()


async def test_bodies_streams_and_idle_keep_alive_outlast_the_deadline(tmp_path: Path) -> None:
    """A slow body after its headers, a response that lasts past the deadline, and a
    kept-alive connection idle past it whose next request then comes whole: all served.
    A next request trickled on that connection is closed at the deadline."""
    async with orchestrator(tmp_path, request_header_timeout_s=1.0) as (base, _app):
        reader, writer = await connect(base)
        body = b"0123456789"
        writer.write(
            b"POST /test/echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        for byte in body:  # 2 s of body under a 1 s header deadline
            await asyncio.sleep(0.2)
            writer.write(bytes([byte]))
        status = await reader.readline()
        assert status.startswith(b"HTTP/1.1 200"), status
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"Content-Length: 10" in head and await reader.readexactly(10) == body

        await asyncio.sleep(1.5)  # idle, kept alive, past the header deadline
        writer.write(b"GET /test/slow HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        streamed = await reader.readuntil(b"0\r\n\r\n")  # the last chunk: 1.5 s in all
        assert all(b"%d" % i in streamed for i in range(5))

        writer.write(b"GET /healthz HTTP/1.1\r\n")  # then nothing more: a stalled request
        assert await is_closed(reader)
        writer.close()


async def test_the_protocol_keeps_the_servers_keep_alive_timeout(tmp_path: Path) -> None:
    """The guarded server makes aiohttp's protocol with the options it was given."""
    async with orchestrator(tmp_path) as (base, _app):
        reader, writer = await connect(base)
        writer.write(HEADERS)
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        handlers = [o for o in gc.get_objects() if isinstance(o, GuardedRequestHandler)]
        assert handlers
        assert {h.keepalive_timeout for h in handlers} == {serving.KEEPALIVE_TIMEOUT_S}
        writer.close()


async def test_closed_connections_are_freed_without_the_cyclic_collector(
    tmp_path: Path,
) -> None:
    """Each connection refused over the cap, closed at the header deadline or closed by
    its client is freed by reference counting: none is left for the cyclic collector,
    whose passes over 900 such connections a second (bench abuse f) stalled the loop 3
    to 17 ms and put heartbeats past 3x their idle p99. Before: CPython 3.11's transport
    kept a bound method of itself, and a refused handler its parser."""
    from asyncio.selector_events import _SelectorSocketTransport

    async with orchestrator(
        tmp_path, request_header_timeout_s=0.5, max_connections_per_address=4
    ) as (base, _app):
        port = int(base.rsplit(":", 1)[1])
        gc.collect()
        gc.disable()
        try:
            reader, writer = answered = await connect(base)  # closed by its client
            writer.write(HEADERS)
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            stalled = [await connect(base) for _ in range(7)]  # 4 over the cap
            for _, writer in stalled:
                writer.write(b"GET /healthz HTTP/1.1\r\n")  # and never the rest
            for reader, _ in stalled:  # refused at once, or closed at the deadline
                assert await is_closed(reader)
            for _, writer in [answered, *stalled]:
                writer.close()
            await asyncio.sleep(0.3)
            dead_handlers = [
                o
                for o in gc.get_objects()
                if isinstance(o, GuardedRequestHandler) and (o._refused or o._manager is None)
            ]
            dead_transports = [
                o
                for o in gc.get_objects()
                if isinstance(o, _SelectorSocketTransport)
                and o.is_closing()
                and (o.get_extra_info("sockname") or ("", 0))[1] == port
            ]
        finally:
            gc.enable()
        assert dead_handlers == [] and dead_transports == []


# --- accept errors ------------------------------------------------------------------------


class _OutOfDescriptors(socket.socket):
    """A listening socket whose first ``failures`` accepts fail with EMFILE."""

    failures = 100

    def accept(self) -> tuple[socket.socket, Any]:
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


async def test_a_hundred_failed_accepts_log_one_line_and_no_traceback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(asyncio_constants, "ACCEPT_RETRY_DELAY", 0.0)  # retry at once
    loop = asyncio.get_running_loop()
    serving.gate_accept_errors(loop, interval_s=60.0)
    listener = _OutOfDescriptors(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    accepted = asyncio.Event()

    class Accepted(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.set()
            transport.close()

    server = await loop.create_server(Accepted, sock=listener)
    try:
        with capture_logs() as logs:
            _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
            await asyncio.wait_for(accepted.wait(), timeout=30)
            writer.close()
    finally:
        server.close()
        loop.set_exception_handler(None)
    assert listener.failures == 0  # all hundred failed, then the connection was accepted
    lines = [entry for entry in logs if entry["event"] == "cannot accept new connections"]
    assert len(lines) == 1 and lines[0]["error"] == "Too many open files"
    assert "out of system resource" not in caplog.text  # asyncio's own traceback: none


async def test_other_loop_errors_still_reach_the_handler_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        serving.gate_accept_errors(loop)
        loop.call_exception_handler({"message": "something else", "exception": OSError(5, "x")})
        emfile = OSError(errno.EMFILE, "Too many open files")
        loop.call_exception_handler({"message": "not an accept", "exception": emfile})
    finally:
        loop.set_exception_handler(None)
    assert [context["message"] for context in seen] == ["something else", "not an accept"]


# --- the open-file limit ------------------------------------------------------------------


def test_the_soft_open_file_limit_is_raised_to_the_hard_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip("this machine's hard limit leaves no room to lower the soft one")

    def lowered() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    script = textwrap.dedent(
        """
        import resource
        from tunefleet.http.serving import raise_open_file_limit
        print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        print(raise_open_file_limit())
        print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        preexec_fn=lowered,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    before, line, after = done.stdout.strip().splitlines()
    assert before == "256"
    assert int(after) == hard
    assert "raised from 256, to the hard limit" in line and f"{hard:,}" in line


def test_a_limit_that_cannot_be_raised_is_said_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(_which: int, _limits: tuple[int, int]) -> None:
        raise ValueError("not allowed")

    monkeypatch.setattr(resource, "getrlimit", lambda _which: (1024, 4096))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    line = serving.raise_open_file_limit()
    assert line.startswith("open files: up to 1,024; could not raise it to the hard limit 4,096")
    assert "ulimit -n" in line


async def test_aiohttps_own_answer_to_a_malformed_request_says_nosniff(tmp_path: Path) -> None:
    """A request aiohttp cannot parse never reaches the app (nor its prepare hook); the
    server's protocol adds the header to aiohttp's own 400."""
    async with orchestrator(tmp_path) as (base, _app):
        reader, writer = await connect(base)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        status = await reader.readline()
        head = await reader.readuntil(b"\r\n\r\n")
        writer.close()
    assert status.startswith(b"HTTP/1.0 400"), status
    assert b"X-Content-Type-Options: nosniff" in head, head
