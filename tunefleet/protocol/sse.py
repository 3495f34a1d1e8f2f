"""An incremental Server-Sent Events parser (the WHATWG event-stream format).

Both clients read event streams with it: the agent its job stream, the CLI a followed
job. A stream arrives in chunks of whatever size the network delivers, so the parser
keeps partial lines between calls: any split of a byte stream into chunks yields the
same events. It never raises on malformed input, because a garbled stream must cost
the agent a reconnect at worst, never a crash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_BOM = "\ufeff"
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024  # a job_submit carries a whole training config


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event. ``id`` is the stream's last event id when it was dispatched
    (the spec's semantics: an id persists until the stream sets another one)."""

    id: str | None
    event: str
    data: str


class SseParser:
    """Feed bytes, get complete events. Lines end with ``\\r\\n``, ``\\n`` or ``\\r``.

    A line longer than ``max_line_bytes`` is dropped (counted in ``dropped_lines``) so a
    misbehaving server cannot make the agent buffer without bound.
    """

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None
        self.dropped_lines = 0
        self._buffer = bytearray()
        self._skip_lf = False  # the previous chunk ended in \r; a leading \n belongs to it
        self._discarding = False  # inside an over-long line, dropping until its end
        self._first_line = True
        self._event_type = ""
        self._data: list[str] | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        events: list[SseEvent] = []
        if not chunk:
            return events
        start = 0
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                start = 1
        self._buffer += chunk[start:] if start else chunk
        buffer = self._buffer
        position = 0
        while True:
            end = _line_end(buffer, position)
            if end < 0:
                break
            line = bytes(buffer[position:end])
            if buffer[end] == 0x0D:  # \r
                if end + 1 < len(buffer):
                    position = end + 2 if buffer[end + 1] == 0x0A else end + 1
                else:
                    position = end + 1
                    self._skip_lf = True
            else:
                position = end + 1
            self._take_line(line, events)
        del buffer[:position]
        if len(buffer) > self.max_line_bytes:
            buffer.clear()
            if not self._discarding:
                self._discarding = True
                self.dropped_lines += 1
        return events

    def _take_line(self, raw: bytes, events: list[SseEvent]) -> None:
        if self._discarding:
            self._discarding = False
            return
        if len(raw) > self.max_line_bytes:
            self.dropped_lines += 1
            return
        line = raw.decode("utf-8", errors="replace")
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(_BOM)
        if not line:
            self._dispatch(events)
            return
        if line.startswith(":"):
            return  # a comment: servers send them as keep-alives
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event_type = value
        elif field == "data":
            if self._data is None:
                self._data = []
            self._data.append(value)
        elif field == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif field == "retry" and value.isascii() and value.isdigit():
            self.retry_ms = int(value)

    def _dispatch(self, events: list[SseEvent]) -> None:
        data, event_type = self._data, self._event_type
        self._data, self._event_type = None, ""
        if data is None:
            return  # an event with no data field is not dispatched (the spec's rule)
        events.append(SseEvent(self.last_event_id, event_type or "message", "\n".join(data)))


def _line_end(buffer: bytearray, start: int) -> int:
    """Index of the first \\r or \\n at or after ``start``, or -1."""
    lf = buffer.find(b"\n", start)
    cr = buffer.find(b"\r", start, lf if lf >= 0 else len(buffer))
    return cr if cr >= 0 else lf


def decode_event(event: SseEvent) -> tuple[str, dict[str, Any]] | None:
    """The event's type and JSON payload, or None when the data is not a JSON object.

    The type comes from the payload's ``type`` when present (that is what SimpleTuner's
    server and agent rely on), else from the SSE ``event`` field.
    """
    try:
        payload = json.loads(event.data)
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    kind = payload.get("type")
    return (kind if isinstance(kind, str) and kind else event.event), payload
