"""What a follower shows: a live panel on a terminal, plain lines anywhere else.

On a terminal, rich's ``Live`` redraws the job's state, worker, attempt, a progress bar
(step/total, loss, rate, ETA) and the log tail. Piped into a file or CI log, the same
facts come as one line per change (progress every 10 %), so the output stays short.
Either way the command ends with ``final_line``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from tunefleet.cli.follow import JobWatch
from tunefleet.cli.output import (
    NONE,
    attempts_apart,
    duration,
    parse_time,
    plain,
    status_text,
)
from tunefleet.fsm.job import JobState

BAR_WIDTH = 32


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _loss(progress: dict[str, Any]) -> str | None:
    loss = _number(progress.get("loss"))
    return f"loss {loss:.4g}" if loss is not None else None


def _attempt(watch: JobWatch) -> str:
    """'attempt 2 of 4' counts retries spent, as `jobs list` does: a dispatch that never
    reached its worker, a preempted attempt and one the infrastructure ended spend none
    and are counted apart ('(1 not delivered)')."""
    if not watch.attempt:
        return ""
    spent_none, notes = attempts_apart(watch.apart)
    number = max(1, watch.attempt - spent_none)
    of = f" of {watch.max_attempts}" if watch.max_attempts else ""
    return f"attempt {number}{of}" + (f" ({notes})" if notes else "")


def state_line(watch: JobWatch) -> str:
    """'j_1 running on w_2, attempt 1 of 4' / 'j_1 pending, position 2: <why>'."""
    text = f"{watch.job_id} {watch.status}"
    if watch.status == JobState.PENDING:
        if watch.queue_position:
            text += f", position {watch.queue_position}"
        if watch.wait_reason:
            text += f": {watch.wait_reason}"
        return text
    if watch.worker_id:
        text += f" {'to' if watch.status == JobState.DISPATCHED else 'on'} {watch.worker_id}"
    if attempt := _attempt(watch):
        text += f", {attempt}"
    return text


def progress_line(watch: JobWatch) -> str:
    """'step 14/20 (70%), loss 1.335, 5.2 steps/s, ETA 1 s' from what is known."""
    progress = watch.progress
    step, total = _number(progress.get("step")), _number(progress.get("total"))
    parts: list[str] = []
    if step is not None and total:
        parts.append(f"step {plain(step)}/{plain(total)} ({min(100.0, step / total * 100):.0f}%)")
    elif step is not None:
        parts.append(f"step {plain(step)}")
    if loss := _loss(progress):
        parts.append(loss)
    rate = watch.rate.rate()
    if rate is not None:
        parts.append(f"{rate:.3g} steps/s")
    if step is not None and total and (eta := watch.rate.eta_s(step, total)) is not None:
        parts.append(f"ETA {duration(eta)}")
    return ", ".join(parts)


def final_line(detail: dict[str, Any]) -> str:
    """The last line a follower prints: how the job ended, where, and why."""
    job_id, status = detail["job_id"], detail["status"]
    where = f" on {detail['worker_id']}" if detail.get("worker_id") else ""
    started, finished = parse_time(detail.get("started_at")), parse_time(detail.get("finished_at"))
    took = f" in {duration((finished - started).total_seconds())}" if started and finished else ""
    if status == JobState.COMPLETED:
        progress = detail.get("progress") or {}
        facts = [f for f in (_step_fact(progress), _loss(progress)) if f]
        return f"{job_id} completed{where}{took}" + (f": {', '.join(facts)}" if facts else "")
    if status == JobState.FAILED:
        attempts = f" after {detail.get('attempts') or 0} attempt(s)"
        return f"{job_id} failed{where}{attempts}: {detail.get('error') or 'no reason given'}"
    if status == JobState.CANCELLED:
        return f"{job_id} cancelled{where}: {detail.get('error') or 'by request'}"
    return f"{job_id} is {status}"


def _step_fact(progress: dict[str, Any]) -> str | None:
    step, total = _number(progress.get("step")), _number(progress.get("total"))
    if step is None:
        return None
    return f"step {plain(step)}/{plain(total)}" if total else f"step {plain(step)}"


def render(watch: JobWatch, now: datetime | None = None) -> RenderableType:
    """The live panel: state, progress bar and the log tail."""
    header = Text()
    header.append(watch.job_id, style="bold")
    if watch.name:
        header.append(f"  {watch.name}")
    header.append("  ")
    header.append_text(status_text(watch.status))
    rest = state_line(watch).removeprefix(f"{watch.job_id} {watch.status}")
    header.append(rest)
    started = parse_time(watch.started_at)
    if started and not watch.terminal:
        elapsed = ((now or datetime.now(UTC)) - started).total_seconds()
        header.append(f"  ({duration(max(0.0, elapsed), coarse=False)})", style="dim")
    parts: list[RenderableType] = [header]
    step, total = _number(watch.progress.get("step")), _number(watch.progress.get("total"))
    if step is not None or watch.status == JobState.RUNNING:
        row = Table.grid(padding=(0, 2))
        row.add_column(width=BAR_WIDTH)
        row.add_column()
        bar = ProgressBar(total=total or None, completed=step or 0, width=BAR_WIDTH)
        row.add_row(bar, Text(progress_line(watch) or NONE))
        parts.append(row)
    if watch.note:
        parts.append(Text(watch.note, style="yellow"))
    if watch.log_tail:
        tail = "\n".join(watch.log_tail)
        parts.append(Text(tail, style="dim", no_wrap=True, overflow="ellipsis"))
    return Group(*parts)


class LiveReporter:
    """Redraws ``render`` a few times a second on a terminal."""

    def __init__(self, console: Console) -> None:
        self._watch: JobWatch | None = None
        self._live = Live(
            console=console, get_renderable=self._renderable, refresh_per_second=4, transient=False
        )

    def _renderable(self) -> RenderableType:
        return render(self._watch) if self._watch is not None else Text("")

    def __enter__(self) -> LiveReporter:
        self._live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._live.stop()

    def update(self, watch: JobWatch) -> None:
        self._watch = watch
        self._live.refresh()

    def log_line(self, watch: JobWatch, line: dict[str, Any]) -> None:
        self.update(watch)


class LineReporter:
    """One line per change of state, worker or attempt; progress every 10 %."""

    def __init__(self, console: Console, show_logs: bool) -> None:
        self.console = console
        self.show_logs = show_logs
        self._last_state = ""
        self._last_decile = -1
        self._last_attempt = 0
        self._last_note: str | None = None

    def __enter__(self) -> LineReporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def _print(self, text: str, style: str = "") -> None:
        self.console.print(Text(text, style=style), soft_wrap=True)

    def update(self, watch: JobWatch) -> None:
        if watch.note and watch.note != self._last_note:
            self._print(watch.note, "yellow")
        self._last_note = watch.note
        state = state_line(watch)
        if state != self._last_state and not watch.terminal:
            self._print(state)
            self._last_state = state
        if watch.attempt != self._last_attempt:
            self._last_attempt, self._last_decile = watch.attempt, -1  # a retry starts over
        step, total = _number(watch.progress.get("step")), _number(watch.progress.get("total"))
        if step is None or not total or watch.terminal:
            return
        decile = int(min(100.0, step / total * 100) // 10)
        if decile > self._last_decile:
            self._last_decile = decile
            self._print(f"{watch.job_id} {progress_line(watch)}", "dim")

    def log_line(self, watch: JobWatch, line: dict[str, Any]) -> None:
        if self.show_logs:
            self._print(str(line.get("line", "")))


class QuietReporter:
    """Shows nothing (``--json``: only the final detail is printed)."""

    def __enter__(self) -> QuietReporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def update(self, watch: JobWatch) -> None:
        return None

    def log_line(self, watch: JobWatch, line: dict[str, Any]) -> None:
        return None
