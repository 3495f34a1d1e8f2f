"""Reports the agent owes the orchestrator, kept in order until they are delivered.

While the orchestrator is unreachable a job keeps running; its status changes,
progress and log lines wait here and go out in the order they happened once it is
back. Progress is a "latest value", so a newer one replaces one not yet sent; log
lines join the batch at the tail. Status reports are never dropped; log lines are,
oldest first, past a limit, so a trainer that floods its output during a long outage
cannot exhaust the agent's memory (the orchestrator sees the gap in ``seq``).

Each report remembers the attempt (dispatch) of the job it is about, and a status
report says it (``"attempt": n``, an addition SimpleTuner's server ignores): the same
job may be dispatched here again while a report on its earlier attempt is still queued.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import structlog

from tunefleet.agent.backoff import Backoff
from tunefleet.agent.client import OrchestratorUnreachable, RequestRejected
from tunefleet.agent.executor import LogLine
from tunefleet.protocol.endpoints import (
    FailureEvidence,
    JobLogsRequest,
    JobStatusRequest,
    OutputsReport,
    log_line,
)
from tunefleet.protocol.status import TERMINAL_STATUSES, ReportedStatus

log = structlog.get_logger(__name__)

ReportKind = Literal["status", "logs"]


@dataclass(slots=True, eq=False)
class Report:
    """One request to make: a status report (``body`` is its JSON) or a log batch, about
    ``attempt`` of the job (None: unknown)."""

    kind: ReportKind
    job_id: str
    body: dict[str, Any]
    in_flight: bool = False
    attempt: int | None = None
    # A log batch's size as JSON, about (its lines' wire_size): kept under a body limit.
    wire_bytes: int = 0

    def about(self, job_id: str, attempt: int | None) -> bool:
        """Whether it is about that job, and that attempt of it unless ``attempt`` is None."""
        return self.job_id == job_id and (attempt is None or self.attempt == attempt)

    @property
    def final(self) -> bool:
        return self.kind == "status" and self.body.get("status") in TERMINAL_STATUSES

    @property
    def line_count(self) -> int:
        return len(self.body["lines"]) if self.kind == "logs" else 0


# A log batch's bytes as JSON at most: half the orchestrator's default body limit of 1 MiB
# (a batch over it is refused with 413), so that a full batch fits with room to spare.
MAX_BATCH_BYTES = 512 * 1024
# A wire line's JSON beyond its text: {"seq":…,"stream":"stdout","line":…,"at":…}.
_LINE_FRAME_BYTES = 80


def wire_size(text: str) -> int:
    """A log line's bytes in a batch as aiohttp encodes it (json.dumps, ASCII escapes)."""
    return len(json.dumps(text)) + _LINE_FRAME_BYTES


class Outbox:
    def __init__(
        self,
        *,
        max_batch_lines: int = 500,
        max_log_lines: int = 50_000,
        max_batch_bytes: int = MAX_BATCH_BYTES,
    ) -> None:
        self.max_batch_lines = max_batch_lines
        self.max_batch_bytes = max_batch_bytes
        self.max_log_lines = max_log_lines
        self.logs_enabled = True
        self.dropped_log_lines = 0
        self._items: deque[Report] = deque()
        self._log_lines = 0
        self._nonempty = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()

    def __len__(self) -> int:
        return len(self._items)

    def pending(self) -> list[Report]:
        return list(self._items)

    # --- adding -----------------------------------------------------------------------

    def add_status(
        self,
        job_id: str,
        status: str,
        *,
        attempt: int | None = None,
        progress: dict[str, Any] | None = None,
        error: str | None = None,
        outputs: dict[str, Any] | None = None,
        resumed_from: str | None = None,
        failure: dict[str, Any] | None = None,
    ) -> None:
        # Built, not validated: the orchestrator bounds what it takes (a long error is
        # shortened there), and a report must never fail to be made.
        report = JobStatusRequest.model_construct(status=status, progress=progress, error=error)
        if resumed_from is not None:
            report.resumed_from = resumed_from  # the checkpoint the trainer started from
        if attempt is not None:
            report.attempt = attempt
        if outputs is not None:
            # What the attempt stored (its final report only).
            report.outputs = OutputsReport.model_construct(**outputs)
        if failure is not None:
            # A failed run's evidence; an orchestrator before issue 26 ignores it.
            report.failure = FailureEvidence.model_construct(**failure)
        body = report.model_dump(exclude_unset=True)
        self._append(Report("status", job_id, body, attempt=attempt))

    def add_progress(
        self, job_id: str, progress: dict[str, Any], *, attempt: int | None = None
    ) -> None:
        """A ``running`` report with this progress, replacing a newer-than-sent one."""
        for report in reversed(self._items):
            if report.kind != "status" or not report.about(job_id, attempt):
                continue
            if report.final:
                return  # nothing goes out after an attempt's final report
            if report.body["status"] == ReportedStatus.RUNNING and not report.in_flight:
                report.body["progress"] = progress
                return
            break  # the last status for this job is another one: progress comes after it
        self.add_status(job_id, ReportedStatus.RUNNING, attempt=attempt, progress=progress)

    def add_logs(self, job_id: str, attempt: int, lines: Sequence[LogLine]) -> None:
        """Lines join the batch at the tail while it has room (in lines and in bytes),
        else start a new one."""
        if not self.logs_enabled or not lines:
            return
        tail = self._items[-1] if self._items else None
        batch = (
            tail
            if tail is not None
            and tail.kind == "logs"
            and tail.job_id == job_id
            and tail.body["attempt"] == attempt
            and not tail.in_flight
            else None
        )
        for ln in lines:
            size = wire_size(ln.line)
            if (
                batch is None
                or batch.line_count >= self.max_batch_lines
                or (batch.line_count and batch.wire_bytes + size > self.max_batch_bytes)
            ):
                batch = self._new_log_batch(job_id, attempt)
            batch.body["lines"].append(log_line(ln.seq, ln.stream, ln.line, ln.at))
            batch.wire_bytes += size
            self._log_lines += 1
        self._trim_logs()

    def _new_log_batch(self, job_id: str, attempt: int) -> Report:
        # The lines are wire dicts already (a batch grows while it waits).
        body = JobLogsRequest.model_construct(attempt=attempt).model_dump(exclude_unset=True)
        batch = Report("logs", job_id, body | {"lines": []}, attempt=attempt)
        self._append(batch)
        return batch

    def split_batch(self, report: Report) -> bool:
        """Halve a log batch the orchestrator refused as too large (413) in place, its
        second half queued right behind it, and keep later batches under that size.
        False when it holds one line (nothing to halve)."""
        lines = report.body["lines"]
        if report.kind != "logs" or len(lines) < 2 or report not in self._items:
            return False
        half = len(lines) // 2
        rest = Report("logs", report.job_id, report.body | {"lines": lines[half:]})
        rest.attempt = report.attempt
        del lines[half:]
        for batch in (report, rest):
            batch.wire_bytes = sum(wire_size(line["line"]) for line in batch.body["lines"])
        self.max_batch_bytes = max(1, min(self.max_batch_bytes, report.wire_bytes))
        self._items.insert(self._items.index(report) + 1, rest)
        return True

    # --- taking -----------------------------------------------------------------------

    def head(self) -> Report | None:
        return self._items[0] if self._items else None

    async def next(self) -> Report:
        while not self._items:
            await self._nonempty.wait()
        return self._items[0]

    async def wait_empty(self) -> None:
        await self._empty.wait()

    def remove(self, report: Report) -> None:
        """The report was delivered (or refused for good): it leaves the queue."""
        try:
            self._items.remove(report)
        except ValueError:
            return  # dropped meanwhile (its job was abandoned)
        self._log_lines -= report.line_count
        self._changed()

    def drop_job(self, job_id: str, attempt: int | None = None) -> int:
        """Forget every report of an abandoned job (only of that attempt of it, when one is
        given: a newer attempt's reports still go); the one in flight finishes alone."""
        return self._drop(lambda r: r.about(job_id, attempt) and not r.in_flight)

    def disable_logs(self) -> int:
        """The orchestrator takes no logs: stop forwarding and forget the queued ones."""
        self.logs_enabled = False
        return self._drop(lambda r: r.kind == "logs" and not r.in_flight)

    def holds_final(self, job_id: str) -> bool:
        return any(r.final and r.job_id == job_id for r in self._items)

    # --- internals --------------------------------------------------------------------

    def _append(self, report: Report) -> None:
        self._items.append(report)
        self._log_lines += report.line_count
        self._changed()

    def _drop(self, doomed: Callable[[Report], bool]) -> int:
        kept = [r for r in self._items if not doomed(r)]
        dropped = len(self._items) - len(kept)
        self._items = deque(kept)
        self._log_lines = sum(r.line_count for r in kept)
        self._changed()
        return dropped

    def _trim_logs(self) -> None:
        excess = self._log_lines - self.max_log_lines
        if excess <= 0:
            return
        for report in _oldest_log_batches(self._items):
            lines = report.body["lines"]
            cut = min(excess, len(lines))
            del lines[:cut]
            excess -= cut
            self._log_lines -= cut
            self.dropped_log_lines += cut
            if excess <= 0:
                break
        self._items = deque(r for r in self._items if r.kind != "logs" or r.body["lines"])
        log.warning(
            "log buffer full; dropped the oldest lines",
            dropped_total=self.dropped_log_lines,
            limit=self.max_log_lines,
        )
        self._changed()

    def _changed(self) -> None:
        if self._items:
            self._nonempty.set()
            self._empty.clear()
        else:
            self._nonempty.clear()
            self._empty.set()


def _oldest_log_batches(items: Iterable[Report]) -> Iterable[Report]:
    return (r for r in items if r.kind == "logs" and not r.in_flight)


class ReportClient(Protocol):
    async def report_status(self, job_id: str, body: dict[str, Any]) -> None: ...
    async def send_logs(self, job_id: str, body: dict[str, Any]) -> None: ...


class ReportSender:
    """Delivers the outbox head first, retrying with backoff while the orchestrator is
    unreachable and waiting while the agent is offline (``online`` is clear).

    A report refused with 403, 409 or "Job not found" means the job (that attempt of it)
    is no longer this worker's: that attempt's reports are dropped and
    ``on_abandon(job_id, detail, attempt)`` is called.
    A 404 on the logs endpoint (an orchestrator without one, like SimpleTuner's) turns
    log forwarding off. ``on_settled(report)`` is called when a report leaves the queue
    by delivery or final refusal. ``InvalidToken`` propagates: the agent must stop.
    """

    def __init__(
        self,
        outbox: Outbox,
        client: ReportClient,
        *,
        online: asyncio.Event,
        backoff: Backoff,
        sleep: Callable[[float], Awaitable[None]],
        on_abandon: Callable[[str, str, int | None], None],
        on_settled: Callable[[Report], None],
    ) -> None:
        self.outbox = outbox
        self.client = client
        self.online = online
        self.backoff = backoff
        self.sleep = sleep
        self.on_abandon = on_abandon
        self.on_settled = on_settled

    async def run(self) -> None:
        while True:
            report = await self.outbox.next()
            await self.online.wait()
            if report is not self.outbox.head():
                continue  # the queue changed while we waited
            report.in_flight = True
            try:
                await self._send(report)
            except OrchestratorUnreachable as error:
                delay = self.backoff.next_delay()
                log.info(
                    "report not delivered; retrying",
                    job_id=report.job_id,
                    kind=report.kind,
                    error=str(error),
                    retry_in_s=round(delay, 2),
                )
                await self.sleep(delay)
                continue
            except RequestRejected as error:
                self._refused(report, error)
                continue
            finally:
                report.in_flight = False
            self.backoff.reset()
            self.outbox.remove(report)
            self.on_settled(report)

    async def _send(self, report: Report) -> None:
        if report.kind == "status":
            await self.client.report_status(report.job_id, report.body)
        else:
            await self.client.send_logs(report.job_id, report.body)

    def _refused(self, report: Report, error: RequestRejected) -> None:
        if error.status == 413 and self.outbox.split_batch(report):
            # The orchestrator's body limit is lower than this batch: send it in halves.
            log.info("log batch too large; sending it in halves", job_id=report.job_id)
            return
        job_gone = error.detail.startswith("Job not found")
        if report.kind == "logs" and error.status in (404, 405) and not job_gone:
            dropped = self.outbox.disable_logs()
            self.outbox.remove(report)
            log.info(
                "the orchestrator takes no job logs; log forwarding is off",
                status=error.status,
                dropped_batches=dropped + 1,
            )
            return
        if error.status in (403, 409) or job_gone:
            self.outbox.remove(report)
            self.outbox.drop_job(report.job_id, report.attempt)
            log.warning(
                "job no longer assigned to this worker; abandoning it",
                job_id=report.job_id,
                attempt=report.attempt,
                status=error.status,
                detail=error.detail,
            )
            self.on_abandon(report.job_id, error.detail, report.attempt)
            return
        log.error(
            "report refused; dropping it",
            job_id=report.job_id,
            kind=report.kind,
            status=error.status,
            detail=error.detail,
        )
        self.outbox.remove(report)
        self.on_settled(report)
