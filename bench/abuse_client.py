"""The attacker's side of `bench abuse`: closed-loop request lanes, byte-counting event
subscribers and trickling connections, all on raw asyncio protocols (loadgen_http.py),
so the attacker costs little of the machine the orchestrator shares.

Every connection is opened from ATTACKER_HOST, another loopback address, so the
server's per-address bounds (failed sign-ins, connections) tell the attacker apart
from the measuring client, which connects from 127.0.0.1 as an operator would.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from bench.loadgen_http import HttpConnection, HttpError, parse_head

HOST = "127.0.0.1"
ATTACKER_HOST = "127.0.0.2"
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 30.0


@dataclass
class Tally:
    """What an attack sent and how the server answered."""

    requests: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    bytes_sent: int = 0
    bytes_received: int = 0

    def answered(self, status: str, sent: int, received: int) -> None:
        self.requests += 1
        self.statuses[status] += 1
        self.bytes_sent += sent
        self.bytes_received += received

    def answers(self) -> str:
        return answers(self.statuses)


def answers(statuses: Mapping[str, int]) -> str:
    """``200 x 12, 401 x 3``: how a server answered, most frequent first."""
    ranked = sorted(statuses.items(), key=lambda item: -item[1])
    return ", ".join(f"{status} x {n:,}" for status, n in ranked) or "none"


class Lane:
    """One keep-alive connection from the attacker's address, one request at a time,
    reopened when the server closes it (a 401 answers with Connection: close)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: HttpConnection | None = None

    async def send(self, raw: bytes) -> tuple[str, bytes]:
        """(status or error name, body)."""
        try:
            if self.conn is None or self.conn.closed:
                self.conn = await asyncio.wait_for(
                    HttpConnection.open(HOST, self.port, ATTACKER_HOST), CONNECT_TIMEOUT_S
                )
            status, body = await asyncio.wait_for(self.conn.request(raw), REQUEST_TIMEOUT_S)
        except (HttpError, OSError, TimeoutError) as error:
            self.close()
            return type(error).__name__, b""
        return str(status), body

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


async def one_request(port: int, raw: bytes) -> tuple[str, bytes]:
    """One request on a connection of its own from the attacker's address."""
    lane = Lane(port)
    try:
        return await lane.send(raw)
    finally:
        lane.close()


async def flood(
    port: int,
    lanes: int,
    seconds: float,
    max_requests: int,
    next_request: Callable[[int], bytes],
    on_answer: Callable[[str, bytes], None] | None = None,
) -> Tally:
    """``lanes`` closed loops sending ``next_request(i)`` (i counts from 0 over all
    lanes) until ``seconds`` have passed or ``max_requests`` were sent."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    tally = Tally()
    numbers = iter(range(max_requests))

    async def lane() -> None:
        conn = Lane(port)
        try:
            for i in numbers:
                if loop.time() >= deadline:
                    return
                raw = next_request(i)
                status, body = await conn.send(raw)
                tally.answered(status, len(raw), len(body))
                if on_answer is not None:
                    on_answer(status, body)
        finally:
            conn.close()

    await asyncio.gather(*(lane() for _ in range(lanes)))
    return tally


class CountingReader(asyncio.Protocol):
    """A client that sends one request and reads whatever comes back, counting bytes
    and nothing else (an /api/events page that keeps up, at no parsing cost)."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.received = 0
        self.status = ""
        self._head = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if not self.status:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end >= 0:
                with contextlib.suppress(HttpError, ValueError):
                    self.status = str(parse_head(self._head[:end])[0])
                self._head = b""

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_readers(port: int, request: bytes, count: int) -> list[CountingReader]:
    loop = asyncio.get_running_loop()
    readers = []
    for _ in range(count):
        _, reader = await loop.create_connection(
            lambda: CountingReader(request), HOST, port, local_addr=(ATTACKER_HOST, 0)
        )
        readers.append(reader)
    return readers


class Trickle(asyncio.Protocol):
    """A connection that sends a request's headers one byte at a time and never ends
    them: it holds one of the server's sockets (and file descriptors) for as long as
    the server lets it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(b"GET /api/queue HTTP/1.1\r\nHost: x\r\n")  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)

    def drip(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"X")

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


@dataclass
class TrickleCounts:
    opened: int = 0
    refused: int = 0  # connect failed or timed out
    closed_by_server: int = 0
    open_near_end: int = 0  # open shortly before the deadline (the server has had time)
    longest_s: float = 0.0  # the longest any one lived


async def trickle(
    port: int, connections: int, seconds: float, drip_s: float = 1.0
) -> TrickleCounts:
    """Keep ``connections`` trickling connections open for ``seconds``: each sends one
    more header byte every ``drip_s``, and each the server closes or refuses is opened
    again ``drip_s`` later, as a patient attacker would."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    counts = TrickleCounts()
    held: set[Trickle] = set()

    async def slot() -> None:
        while loop.time() < deadline:
            try:
                _, conn = await asyncio.wait_for(
                    loop.create_connection(Trickle, HOST, port, local_addr=(ATTACKER_HOST, 0)),
                    min(CONNECT_TIMEOUT_S, max(0.1, deadline - loop.time())),
                )
            except (OSError, TimeoutError):
                counts.refused += 1
                await asyncio.sleep(drip_s)
                continue
            counts.opened += 1
            held.add(conn)
            opened_at = loop.time()
            try:
                while loop.time() < deadline and not conn.lost.done():
                    conn.drip()
                    await asyncio.wait({conn.lost}, timeout=min(drip_s, deadline - loop.time()))
            finally:
                held.discard(conn)
                conn.close()
            counts.longest_s = max(counts.longest_s, loop.time() - opened_at)
            if conn.lost.done() and loop.time() < deadline:
                counts.closed_by_server += 1
                await asyncio.sleep(drip_s)

    async def count_near_end() -> None:
        await asyncio.sleep(max(0.0, seconds - min(0.5, seconds / 4)))
        counts.open_near_end = len(held)

    await asyncio.gather(count_near_end(), *(slot() for _ in range(connections)))
    return counts
