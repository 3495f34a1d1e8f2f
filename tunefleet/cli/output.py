"""How client commands print: rich tables for people, JSON for scripts, relative times.

The API already sends timestamps as ISO 8601, so JSON output passes them through and
only tables turn them into "2 min ago".
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tunefleet.fsm.job import JobState
from tunefleet.fsm.worker import WorkerState

NONE = "-"
STATUS_STYLES: dict[str, str] = {
    WorkerState.IDLE: "green",
    WorkerState.BUSY: "cyan",
    WorkerState.CONNECTING: "yellow",
    WorkerState.DRAINING: "yellow",
    WorkerState.OFFLINE: "dim",
    JobState.PENDING_APPROVAL: "bold yellow",
    JobState.PENDING: "yellow",
    JobState.DISPATCHED: "cyan",
    JobState.RUNNING: "cyan",
    JobState.COMPLETED: "green",
    JobState.FAILED: "red",
    JobState.CANCELLED: "magenta",
}


PIPE_WIDTH = 240


# The queue API's counts of a job's attempts that spent no retry, and how each reads.
ATTEMPTS_APART: Final = (
    ("undelivered", "not delivered"),
    ("preempted", "preempted"),
    ("infrastructure_failures", "infrastructure"),
)


def attempts_apart(counts: Mapping[str, Any]) -> tuple[int, str]:
    """How many of a job's attempts spent no retry, and the note saying which:
    ``(2, "1 not delivered, 1 infrastructure")``."""
    found = [(counts.get(key) or 0, label) for key, label in ATTEMPTS_APART]
    return sum(n for n, _ in found), ", ".join(f"{n} {label}" for n, label in found if n)


def console(stderr: bool = False) -> Console:
    """A console on the current stdout (made per call: tests swap the streams). Piped
    into grep or a file, tables get a wide line instead of rich's 80 columns, so rows
    stay one line each."""
    out = Console(stderr=stderr, highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = PIPE_WIDTH
    return out


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def print_line(text: str) -> None:
    """Plain text that must not wrap or be read as markup (tokens, commands, log lines)."""
    click.echo(text)


def parse_time(value: str | float | None) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def relative_time(value: str | float | None, now: datetime | None = None) -> str:
    """'just now', '45 s ago', '2 min ago', '3 h ago', '4 d ago' (or 'in 2 min')."""
    moment = parse_time(value)
    if moment is None:
        return NONE
    seconds = ((now or datetime.now(UTC)) - moment).total_seconds()
    if abs(seconds) < 5:
        return "just now"
    text = duration(abs(seconds), coarse=True)
    return f"{text} ago" if seconds > 0 else f"in {text}"


def duration(seconds: float, coarse: bool = False) -> str:
    """'42 s', '3 min 5 s', '2 h 10 min', '3 d 4 h'; ``coarse`` keeps only the first unit."""
    if not math.isfinite(seconds) or seconds < 0:
        return NONE
    total = int(seconds)
    if total < 60:
        return f"{seconds:.1f} s" if seconds < 10 and not coarse else f"{total} s"
    units = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))
    parts: list[str] = []
    for name, size in units:
        if total >= size:
            parts.append(f"{total // size} {name}")
            total %= size
        if len(parts) == (1 if coarse else 2):
            break
        if parts and total == 0:
            break
    return " ".join(parts)


def status_text(status: str | None) -> Text:
    word = status or NONE
    return Text(word, style=STATUS_STYLES.get(word, ""))


def pairs_text(values: Mapping[str, Any] | None) -> str:
    if not values:
        return NONE
    return ", ".join(f"{k}={v}" for k, v in values.items())


def plain(value: Any) -> str:
    if value is None or value == "" or value == [] or value == {}:
        return NONE
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def progress_text(progress: Mapping[str, Any] | None) -> str:
    """'14/20 (70%)' or '14' or '-'."""
    if not progress:
        return NONE
    step, total = progress.get("step"), progress.get("total")
    if isinstance(step, int | float) and isinstance(total, int | float) and total > 0:
        percent = min(100.0, step / total * 100)
        return f"{plain(step)}/{plain(total)} ({percent:.0f}%)"
    return plain(step)


def print_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[str | Text]],
    empty: str,
    footer: str = "",
    wrap: Collection[str] = (),
) -> None:
    """A table with a header; ``empty`` instead when there are no rows. Only the
    columns named in ``wrap`` (free text) wrap on a narrow terminal; ids never do."""
    out = console()
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        if column in wrap:
            table.add_column(column, overflow="fold")
        else:
            table.add_column(column, no_wrap=True, overflow="ellipsis")
    count = 0
    for row in rows:
        table.add_row(*(_cell(value) for value in row))
        count += 1
    if count == 0:
        out.print(empty)
        return
    out.print(table)
    if footer:
        out.print(footer, style="dim")


def no_match(what: str, filters: Mapping[str, str | Sequence[str] | None], unfiltered: str) -> str:
    """The line for an empty table: ``unfiltered`` (e.g. how to make the first one) when
    nothing was filtered, else that no ``what`` matches the filters, named as typed:
    with a filter, an empty list says nothing about whether any exist."""
    named = [
        f"{option} {value}"
        for option, values in filters.items()
        for value in ([values] if isinstance(values, str) else values or ())
    ]
    if not named:
        return unfiltered
    return f"No {what} matches {' '.join(named)}."


def print_fields(fields: Iterable[tuple[str, str | Text]]) -> None:
    """'Name   value' lines for one object (the show commands)."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for name, value in fields:
        table.add_row(name, _cell(value))
    console().print(table)


def _cell(value: str | Text) -> Text:
    # Plain strings become Text so brackets in names or labels are not read as markup.
    return Text(value) if isinstance(value, str) else value


def paging_footer(shown: int, offset: int, total: int) -> str:
    if total <= offset + shown:
        return ""
    return f"{offset + 1}-{offset + shown} of {total}; --offset {offset + shown} for more"
