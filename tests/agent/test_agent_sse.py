"""The SSE parser: the event-stream format, and invariance under any chunking."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tunefleet.protocol.sse import SseEvent, SseParser, decode_event


def parse(*chunks: bytes) -> list[SseEvent]:
    parser = SseParser()
    events: list[SseEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    return events


def test_fields_comments_and_multiline_data() -> None:
    stream = (
        b": keep-alive comment\n"
        b"id: 7\n"
        b"event: job_submit\n"
        b'data: {"type": "job_submit",\n'
        b'data:  "job_id": "j_1"}\n'
        b"\n"
    )
    assert parse(stream) == [
        SseEvent("7", "job_submit", '{"type": "job_submit",\n "job_id": "j_1"}')
    ]


def test_crlf_and_lone_cr_line_endings() -> None:
    assert parse(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n") == [
        SseEvent(None, "message", "a"),
        SseEvent(None, "message", "b"),
        SseEvent(None, "message", "c"),
    ]


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    # A \r at the end of one chunk and \n at the start of the next are one line end,
    # not an empty line in between (which would dispatch an event early).
    assert parse(b"data: a\r", b"\ndata: b\r", b"\n\r\n") == [SseEvent(None, "message", "a\nb")]


def test_id_persists_until_changed_and_event_type_resets() -> None:
    events = parse(b"id: 1\nevent: ping\ndata: {}\n\ndata: x\n\nid: 2\ndata: y\n\n")
    assert [(e.id, e.event) for e in events] == [("1", "ping"), ("1", "message"), ("2", "message")]


def test_retry_and_ignored_fields() -> None:
    parser = SseParser()
    events = parser.feed(b"retry: 2500\nretry: soon\nbogus: 1\nid: a\0b\ndata\n\n")
    assert parser.retry_ms == 2500
    assert parser.last_event_id is None  # an id with NUL is ignored (the spec's rule)
    assert events == [SseEvent(None, "message", "")]  # "data" with no colon: empty value


def test_no_data_no_dispatch_and_incomplete_event_is_held() -> None:
    parser = SseParser()
    assert parser.feed(b"event: drain\n\n") == []
    assert parser.feed(b"data: half") == []
    assert parser.feed(b"\n") == []
    assert parser.feed(b"\n") == [SseEvent(None, "message", "half")]


def test_leading_bom_is_stripped_and_bad_utf8_replaced() -> None:
    events = parse(b"\xef\xbb\xbfdata: \xff ok\n\n")
    assert events == [SseEvent(None, "message", "\ufffd ok")]


def test_over_long_lines_are_dropped_whatever_the_chunking() -> None:
    long_line = b"data: " + b"x" * 40 + b"\n"
    stream = long_line + b"data: short\n\n"
    whole = SseParser(max_line_bytes=32)
    assert whole.feed(stream) == [SseEvent(None, "message", "short")]
    assert whole.dropped_lines == 1
    byte_by_byte = SseParser(max_line_bytes=32)
    events = [e for i in range(len(stream)) for e in byte_by_byte.feed(stream[i : i + 1])]
    assert events == [SseEvent(None, "message", "short")]
    assert byte_by_byte.dropped_lines == 1


def test_decode_event_takes_the_type_from_the_json() -> None:
    assert decode_event(SseEvent("1", "message", '{"type": "drain"}')) == (
        "drain",
        {"type": "drain"},
    )
    assert decode_event(SseEvent("1", "ping", "{}")) == ("ping", {})
    assert decode_event(SseEvent(None, "message", "not json")) is None
    assert decode_event(SseEvent(None, "message", "[1, 2]")) is None


# --- properties -------------------------------------------------------------------------

_text = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n\0"),
    max_size=20,
)
_field_line = st.one_of(
    st.builds(lambda v: f"data: {v}", _text),
    st.builds(lambda v: f"data:{v}", _text),
    st.builds(lambda v: f"event: {v}", _text),
    st.builds(lambda v: f"id: {v}", _text),
    st.builds(lambda v: f": {v}", _text),
    st.builds(lambda v: f"retry: {v}", st.integers(0, 10_000)),
    st.just(""),
)
_newline = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def event_streams(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(st.tuples(_field_line, _newline), max_size=30))
    return "".join(line + end for line, end in lines).encode()


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=10)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_chunking_yields_the_same_events(data: st.DataObject) -> None:
    stream = data.draw(event_streams())
    chunks = data.draw(splits(stream))
    whole = SseParser()
    split = SseParser()
    expected = whole.feed(stream)
    got = [event for chunk in chunks for event in split.feed(chunk)]
    assert got == expected
    assert (split.last_event_id, split.retry_ms) == (whole.last_event_id, whole.retry_ms)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=12))
def test_arbitrary_bytes_never_crash(chunks: list[bytes]) -> None:
    parser = SseParser(max_line_bytes=48)
    for chunk in chunks:
        for event in parser.feed(chunk):
            assert isinstance(event.data, str)
            decode_event(event)
