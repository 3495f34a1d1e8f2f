"""Capturing a job's stdout and stderr: to disk in full, to the orchestrator in batches.

Reading the pipes never waits on the network. Lines go to output.log and to a
bounded queue that one forwarding task drains into the `on_event` callback; when
the callback is slower than the trainer, the oldest queued lines are skipped (a
notice says how many) while output.log still has every line.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from datetime import UTC, datetime
from typing import IO

import structlog

from tunefleet.agent.job_events import (
    EventCallback,
    ExecutorEvent,
    LogBatch,
    LogLine,
    ProgressReported,
)
from tunefleet.protocol.fields import LogStream

log = structlog.get_logger(__name__)

_READ_CHUNK_BYTES = 64 * 1024
_TRUNCATED = " …[line truncated]"
NOTE_PREFIX = "[tunefleet] "


class LineSplitter:
    """Bytes in, text lines out; a line longer than `max_line_bytes` is cut there."""

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self._buffer = b""
        self._skipping = False  # inside the rest of a line already cut

    def feed(self, data: bytes) -> list[str]:
        self._buffer += data
        lines: list[str] = []
        if b"\n" in data:
            *parts, self._buffer = self._buffer.split(b"\n")
            for part in parts:
                if self._skipping:
                    self._skipping = False
                    continue
                lines.append(self._decode(part))
        if len(self._buffer) > self.max_line_bytes:
            if not self._skipping:
                lines.append(self._decode(self._buffer))
                self._skipping = True
            self._buffer = b""
        return lines

    def finish(self) -> list[str]:
        rest, self._buffer = self._buffer, b""
        return [self._decode(rest)] if rest and not self._skipping else []

    def _decode(self, raw: bytes) -> str:
        cut = len(raw) > self.max_line_bytes
        text = raw[: self.max_line_bytes].decode("utf-8", errors="replace").rstrip("\r")
        return text + _TRUNCATED if cut else text


class EventForwarder:
    """The one task that awaits `on_event`; everyone else only queues for it."""

    def __init__(
        self,
        on_event: EventCallback,
        *,
        batch_lines: int = 200,
        interval_s: float = 0.5,
        max_pending_lines: int = 5_000,
    ) -> None:
        self._on_event = on_event
        self._batch_lines = max(1, batch_lines)
        self._interval_s = interval_s
        self._max_pending = max(1, max_pending_lines)
        self._control: deque[ExecutorEvent] = deque()
        self._lines: deque[LogLine] = deque()
        self._progress: dict[str, object] | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self._dropped = 0
        self._last_dropped_seq = 0
        self.dropped_total = 0
        self.callback_errors = 0

    def send(self, event: ExecutorEvent) -> None:
        self._control.append(event)
        self._wake.set()

    def add_line(self, line: LogLine) -> None:
        if len(self._lines) >= self._max_pending:
            dropped = self._lines.popleft()
            self._dropped += 1
            self.dropped_total += 1
            self._last_dropped_seq = dropped.seq
        self._lines.append(line)
        if len(self._lines) >= self._batch_lines:
            self._wake.set()

    def set_progress(self, progress: dict[str, object]) -> None:
        self._progress = progress
        self._wake.set()

    def close(self) -> None:
        """Deliver what is queued, then let `run()` return."""
        self._closing = True
        self._wake.set()

    async def run(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval_s)
            self._wake.clear()
            await self._flush()
        await self._flush()

    async def _flush(self) -> None:
        while self._control:
            await self._deliver(self._control.popleft())
        # Only what is queued now: a flood arriving meanwhile must not starve progress.
        budget = len(self._lines)
        while budget > 0 and self._lines:
            await self._note_dropped()
            count = min(budget, self._batch_lines, len(self._lines))
            budget -= count
            await self._deliver(LogBatch([self._lines.popleft() for _ in range(count)]))
        await self._note_dropped()
        if self._progress is not None:
            progress, self._progress = self._progress, None
            await self._deliver(ProgressReported(dict(progress)))

    async def _note_dropped(self) -> None:
        """Say how many lines were skipped, under the seq of the last one skipped.

        Skipped lines sit between what was sent and what is queued, so that seq keeps
        the forwarded order; checked again after each await, as more may be skipped.
        """
        while self._dropped:
            count, seq, self._dropped = self._dropped, self._last_dropped_seq, 0
            notice = f"{NOTE_PREFIX}{count} lines not forwarded (output too fast); "
            notice += "output.log has them all"
            await self._deliver(LogBatch([LogLine(seq, "stderr", notice, time.time())]))

    async def _deliver(self, event: ExecutorEvent) -> None:
        try:
            await self._on_event(event)
        except Exception as error:  # a failing callback must not stop the job or its logs
            self.callback_errors += 1
            log.warning(
                "job event callback failed", event_type=type(event).__name__, error=repr(error)
            )


class OutputCapture:
    """Numbers each line, keeps it on disk with its stream tag, and queues it to forward."""

    def __init__(
        self,
        log_file: IO[str],
        forwarder: EventForwarder,
        *,
        max_line_bytes: int = 8 * 1024,
        tail_lines: int = 20,
    ) -> None:
        self._file = log_file
        self._forwarder = forwarder
        self.max_line_bytes = max_line_bytes
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._last: dict[str, str] = {}
        self._seq = 0
        self._disk_ok = True

    @property
    def tail(self) -> list[str]:
        return list(self._tail)

    def last_line(self) -> str | None:
        """The last non-blank stderr line (where errors go), else stdout's."""
        return self._last.get("stderr") or self._last.get("stdout")

    def add(self, stream: LogStream, line: str, *, informative: bool = False) -> None:
        self._seq += 1
        at = time.time()
        self._write(f"{datetime.fromtimestamp(at, UTC).isoformat()} {stream}: {line}\n")
        self._tail.append(line)
        if line.strip() and not informative:
            self._last[stream] = line
        self._forwarder.add_line(LogLine(self._seq, stream, line, at))

    def note(self, text: str) -> None:
        """tunefleet's own remark in the job's log (a start failure, ignored lines)."""
        self.add("stderr", NOTE_PREFIX + text)

    def inform(self, text: str) -> None:
        """tunefleet's remark that is no error (never a failed job's reason)."""
        self.add("stdout", NOTE_PREFIX + text, informative=True)

    async def pump(self, stream: LogStream, reader: asyncio.StreamReader) -> None:
        splitter = LineSplitter(self.max_line_bytes)
        while chunk := await reader.read(_READ_CHUNK_BYTES):
            for line in splitter.feed(chunk):
                self.add(stream, line)
            self.flush()
            # read() returns without yielding while data is buffered: yield, so a
            # flood cannot starve the forwarder, the progress reader or a cancel.
            await asyncio.sleep(0)
        for line in splitter.finish():
            self.add(stream, line)
        self.flush()

    def flush(self) -> None:
        if self._disk_ok:
            try:
                self._file.flush()
            except OSError as error:
                self._disk_failed(error)

    def _write(self, text: str) -> None:
        if not self._disk_ok:
            return
        try:
            self._file.write(text)
        except OSError as error:
            self._disk_failed(error)

    def _disk_failed(self, error: OSError) -> None:
        # The job keeps running and its lines keep going to the orchestrator.
        self._disk_ok = False
        log.warning("cannot write job output.log", error=str(error))
