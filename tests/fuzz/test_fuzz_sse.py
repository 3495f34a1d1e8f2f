"""Property: what the orchestrator frames on a worker's stream is what the agent reads.

tests/agent/test_agent_sse.py checks the agent's parser against itself (any chunking
gives the same events) and on hand-written streams. The gap it leaves is an oracle for
arbitrary payloads: here the orchestrator's own framing (``routes_workers._send`` over
aiohttp-sse's ``EventSourceResponse.send``, with the "\\n" separator the server uses)
writes random events — any JSON strings, including line separators, NULs, lone "\\r"
and non-ASCII — and the agent's ``SseParser`` reads them back from random chunks, with
pings and comments in between: the same types, payloads and ids, in order.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from aiohttp_sse import EventSourceResponse
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.security.conftest import fuzz_examples
from tunefleet.actors.stream import StreamEvent
from tunefleet.http.routes_workers import _send
from tunefleet.protocol.sse import SseParser, decode_event


class CapturingStream(EventSourceResponse):
    """The real framing, written to memory instead of a socket."""

    def __init__(self) -> None:
        super().__init__(sep="\n")
        self.wire = bytearray()

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        self.wire += data


def frame(
    loop: asyncio.AbstractEventLoop, events: list[StreamEvent], comments: list[bool]
) -> bytes:
    async def run() -> bytes:
        sse = CapturingStream()
        for event, comment_before in zip(events, comments, strict=True):
            if comment_before:
                sse.wire += b": keep-alive\n\n"
            await _send(sse, event)
        return bytes(sse.wire)

    return loop.run_until_complete(run())


json_text = st.text(max_size=30)  # any code point, line separators and NUL included
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | json_text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(json_text, inner, max_size=3),
    max_leaves=8,
)
event_types = st.sampled_from(["job_submit", "job_cancel", "drain", "shutdown", "ping"])


@st.composite
def stream_events(draw: st.DrawFn) -> list[StreamEvent]:
    count = draw(st.integers(1, 6))
    events = []
    for n in range(count):
        kind = draw(event_types)
        data: dict[str, Any] = {
            "type": kind,
            **draw(st.dictionaries(json_text, json_values, max_size=4)),
        }
        data["type"] = kind
        event_id = draw(st.none() | st.just(n + 1))
        events.append(StreamEvent(event_id, kind, data))
    return events


def test_the_agent_reads_exactly_what_the_orchestrator_framed() -> None:
    loop = asyncio.new_event_loop()
    try:
        roundtrip(loop)
    finally:
        loop.close()


def roundtrip(loop: asyncio.AbstractEventLoop) -> None:
    @settings(max_examples=fuzz_examples(100), deadline=None, derandomize=True, database=None)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        check_one(loop, data)

    check()


def check_one(loop: asyncio.AbstractEventLoop, data: st.DataObject) -> None:
    events = data.draw(stream_events())
    comments = data.draw(st.lists(st.booleans(), min_size=len(events), max_size=len(events)))
    wire = frame(loop, events, comments)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=12)))
    bounds = [0, *cuts, len(wire)]
    parser = SseParser()
    got = [e for a, b in itertools.pairwise(bounds) for e in parser.feed(wire[a:b])]

    assert len(got) == len(events), wire
    last_id: str | None = None
    for sent, received in zip(events, got, strict=True):
        if sent.event_id:
            last_id = str(sent.event_id)
        assert received.id == last_id
        assert received.event == sent.type
        assert decode_event(received) == (sent.type, sent.data)
