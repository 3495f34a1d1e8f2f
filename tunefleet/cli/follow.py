"""Following a job until it ends: its state, worker, attempt, progress and log tail.

State comes from ``GET /api/queue/{id}`` and then the live feed ``/api/events``; if the
feed cannot be had (or breaks) the follower polls ``GET /api/queue/{id}`` every second
instead. The log tail comes from ``GET /api/queue/{id}/logs?follow=true``. What is
shown is up to a ``Reporter`` (follow_view.py); this module only keeps the state.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tunefleet.cli.exit_codes import ExitCode
from tunefleet.cli.output import ATTEMPTS_APART
from tunefleet.client.errors import ClientError, StreamFailed, Unreachable
from tunefleet.client.operations import job_path
from tunefleet.client.transport import Transport, event_data
from tunefleet.fsm.job import TERMINAL_JOB_STATES, JobState

POLL_INTERVAL_S = 1.0
RECONNECT_WINDOW_S = 30.0  # keep polling through an orchestrator restart this long
LOG_TAIL_LINES = 10
LOG_DRAIN_S = 3.0  # after the end, wait this long for the last log lines
_STREAM_READ_S = 45.0  # the server pings every 15 s


def outcome_exit_code(status: str) -> ExitCode:
    """0 completed, 1 failed, 3 cancelled (docs/cli.md)."""
    if status == JobState.COMPLETED:
        return ExitCode.OK
    return ExitCode.CANCELLED if status == JobState.CANCELLED else ExitCode.FAILED


class RateMeter:
    """Steps per second over the last ``window_s``, from progress reports."""

    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self.clock = clock
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, step: float) -> None:
        now = self.clock()
        if self._samples and step < self._samples[-1][1]:
            self._samples.clear()  # a new attempt starts over
        if self._samples and step == self._samples[-1][1]:
            return
        self._samples.append((now, step))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.window_s:
            self._samples.popleft()

    def rate(self) -> float | None:
        if len(self._samples) < 2:
            return None
        (t0, s0), (t1, s1) = self._samples[0], self._samples[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None

    def eta_s(self, step: float, total: float) -> float | None:
        rate = self.rate()
        return (total - step) / rate if rate and total >= step else None


@dataclass
class JobWatch:
    """What the follower knows about the job; updated from details and events."""

    job_id: str
    status: str = JobState.PENDING
    name: str | None = None
    worker_id: str | None = None
    attempt: int = 0  # dispatches so far, the undelivered ones included
    # Attempts that spent no retry, by the API's count (output.ATTEMPTS_APART).
    apart: dict[str, int] = field(default_factory=dict)
    max_attempts: int | None = None
    progress: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    wait_reason: str | None = None
    queue_position: int | None = None
    started_at: str | None = None
    log_tail: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))
    rate: RateMeter = field(default_factory=RateMeter)
    note: str | None = None  # e.g. "polling: the event stream broke"

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_JOB_STATES

    def apply_detail(self, detail: dict[str, Any]) -> None:
        self.status = detail.get("status") or self.status
        self.name = detail.get("name") or detail.get("config_name") or self.name
        self.worker_id = detail.get("worker_id")
        self.attempt = detail.get("attempts") or 0
        self.apart = {key: detail.get(key) or 0 for key, _ in ATTEMPTS_APART}
        if isinstance(detail.get("max_retries"), int):
            self.max_attempts = detail["max_retries"] + 1
        self.error = detail.get("error")
        self.wait_reason = detail.get("wait_reason")
        self.queue_position = detail.get("queue_position")
        self.started_at = detail.get("started_at")
        self._progress(detail.get("progress"))

    def apply_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "job":
            self.status = data.get("status") or self.status
            self.worker_id = data.get("worker_id")
            self.attempt = data.get("attempt") or self.attempt
            for key, _ in ATTEMPTS_APART:
                self.apart[key] = data.get(key) or self.apart.get(key, 0)
            self.error = data.get("error")
            if self.status != JobState.PENDING:
                self.wait_reason = self.queue_position = None
            # The whole object, None once requeued (the next attempt starts afresh).
            self._progress(data.get("progress") or {})
        elif kind == "job_progress":
            # The keys the report changed, to merge into what we hold.
            self._progress(data.get("progress"), merge=True)

    def _progress(self, progress: Any, *, merge: bool = False) -> None:
        if not isinstance(progress, dict):
            return
        self.progress = {**self.progress, **progress} if merge else progress
        step = progress.get("step")
        if isinstance(step, int | float):
            self.rate.add(float(step))


class Reporter(Protocol):
    def update(self, watch: JobWatch) -> None: ...

    def log_line(self, watch: JobWatch, line: dict[str, Any]) -> None: ...


async def follow_job(api: Transport, job_id: str, reporter: Reporter, logs: bool) -> dict[str, Any]:
    """Follow until the job ends; returns its final detail (``GET /api/queue/{id}``)."""
    watch = JobWatch(job_id)
    detail = await api.get(job_path(job_id))
    watch.apply_detail(detail)
    reporter.update(watch)
    if watch.terminal:
        return detail
    log_task = asyncio.create_task(_follow_logs(api, watch, reporter)) if logs else None
    try:
        await _follow_state(api, watch, reporter)
        if log_task is not None:
            # The log stream sends its own end; give it a moment for the last lines.
            await asyncio.wait({log_task}, timeout=LOG_DRAIN_S)
    finally:
        if log_task is not None and not log_task.done():
            log_task.cancel()
    final = await api.get(job_path(job_id))
    watch.apply_detail(final)
    reporter.update(watch)
    return final


async def _follow_state(api: Transport, watch: JobWatch, reporter: Reporter) -> None:
    try:
        await _from_events(api, watch, reporter)
    except ClientError as error:
        watch.note = f"polling every {POLL_INTERVAL_S:g} s: the event stream failed ({error})"
        reporter.update(watch)
    if not watch.terminal:
        await _poll(api, watch, reporter)


async def _from_events(api: Transport, watch: JobWatch, reporter: Reporter) -> None:
    """Until the job ends; returns early (to polling) if the feed overflows or closes."""
    async with api.stream("/api/events", read_timeout_s=_STREAM_READ_S) as events:
        async for event in events:
            if event.event == "hello":
                # Subscribed now: read the state again so nothing between is missed.
                watch.apply_detail(await api.get(job_path(watch.job_id)))
            elif event.event in ("job", "job_progress"):
                data = event_data(event)
                if data.get("job_id") != watch.job_id:
                    continue
                watch.apply_event(event.event, data)
            elif event.event == "overflow":
                raise StreamFailed("the event stream fell behind")
            else:
                continue
            reporter.update(watch)
            if watch.terminal:
                return
    raise StreamFailed("the orchestrator closed the event stream")


async def _poll(api: Transport, watch: JobWatch, reporter: Reporter) -> None:
    failing_since: float | None = None
    while not watch.terminal:
        await asyncio.sleep(POLL_INTERVAL_S)
        try:
            detail = await api.get(job_path(watch.job_id))
        except Unreachable as error:
            now = time.monotonic()
            failing_since = failing_since or now
            if now - failing_since > RECONNECT_WINDOW_S:
                raise
            watch.note = f"retrying: {error}"
            reporter.update(watch)
            continue
        failing_since = None
        if watch.note and watch.note.startswith("retrying"):
            watch.note = None
        watch.apply_detail(detail)
        reporter.update(watch)


async def stream_logs(
    api: Transport, job_id: str, on_line: Callable[[dict[str, Any]], None]
) -> dict[str, Any] | None:
    """Every log line, then new ones as they come, until the job ends: returns the
    ``end`` event's data (``status``, ``error``), or None if the stream ended early."""
    async with api.stream(
        job_path(job_id, "/logs"), {"follow": "true"}, read_timeout_s=_STREAM_READ_S
    ) as events:
        async for event in events:
            if event.event == "log":
                on_line(event_data(event))
            elif event.event == "end":
                return event_data(event)
    return None


async def _follow_logs(api: Transport, watch: JobWatch, reporter: Reporter) -> None:
    def on_line(line: dict[str, Any]) -> None:
        watch.log_tail.append(str(line.get("line", "")))
        reporter.log_line(watch, line)

    try:
        await stream_logs(api, watch.job_id, on_line)
    except ClientError as error:
        watch.log_tail.append(f"[log stream stopped: {error}]")
        reporter.update(watch)
