"""GPU usage, derived from attempts: pure functions over plain values, no storage.

An attempt holds its job's ``gpu_count`` GPUs from dispatch to its end, whatever the
outcome (failed and preempted attempts burned the GPUs too); a running one counts up to
now. A CPU job (``gpu_count`` 0) holds no GPU and counts 0, even on a GPU worker: the
scheduler does not keep the worker's GPUs from other jobs for it.

Times are counted in whole milliseconds (each end rounded on its own) so that the daily
pieces of an attempt add up exactly to the attempt's own figure: the rolled-up usage is the
sum of the attempts' GPU-seconds, with no rounding drift. Days are UTC days; an attempt
spanning midnight is split at it.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

DAY_MS = 86_400_000
UsageBy = Literal["user", "team"]
USAGE_BY: tuple[UsageBy, ...] = ("user", "team")


@dataclass(frozen=True, slots=True)
class AttemptSpan:
    """One attempt as accounting sees it: who, how many GPUs, from when to when."""

    job_id: str
    attempt: int
    user: str | None
    team: str | None
    gpus: int
    dispatched_at: float
    ended_at: float | None  # None: still running


@dataclass(frozen=True, slots=True)
class UsageRow:
    """GPU-milliseconds of one user or team on one UTC day."""

    day: dt.date
    key: str
    gpu_ms: int
    attempts: int

    @property
    def gpu_seconds(self) -> float:
        return self.gpu_ms / 1000


def to_ms(seconds: float) -> int:
    return round(seconds * 1000)


def _span_ms(span: AttemptSpan, now: float) -> tuple[int, int]:
    start = to_ms(span.dispatched_at)
    end = to_ms(now if span.ended_at is None else span.ended_at)
    return start, max(start, end)


def attempt_gpu_ms(span: AttemptSpan, now: float) -> int:
    """GPUs held x (end, or now, - dispatch), in GPU-milliseconds."""
    start, end = _span_ms(span, now)
    return max(0, span.gpus) * (end - start)


def attempt_gpu_seconds(span: AttemptSpan, now: float) -> float:
    return attempt_gpu_ms(span, now) / 1000


def day_pieces(
    span: AttemptSpan, now: float, since: float | None = None, until: float | None = None
) -> list[tuple[dt.date, int]]:
    """The attempt's GPU-ms per UTC day, clipped to [since, until); days with none left out."""
    start, end = _span_ms(span, now)
    if since is not None:
        start = max(start, to_ms(since))
    if until is not None:
        end = min(end, to_ms(until))
    gpus = max(0, span.gpus)
    pieces: list[tuple[dt.date, int]] = []
    while start < end and gpus:
        day_start = start - start % DAY_MS
        piece_end = min(end, day_start + DAY_MS)
        pieces.append((_day(day_start), gpus * (piece_end - start)))
        start = piece_end
    return pieces


def _day(ms: int) -> dt.date:
    return dt.date(1970, 1, 1) + dt.timedelta(days=ms // DAY_MS)


def roll_up(
    spans: Iterable[AttemptSpan],
    by: UsageBy,
    now: float,
    since: float | None = None,
    until: float | None = None,
) -> list[UsageRow]:
    """Usage per (UTC day, user or team), ordered by day then key. An attempt is counted
    on every day it held GPUs; `attempts` counts the attempts with a piece on that day."""
    totals: dict[tuple[dt.date, str], int] = defaultdict(int)
    counts: dict[tuple[dt.date, str], int] = defaultdict(int)
    for span in spans:
        key = (span.user if by == "user" else span.team) or "-"
        for day, gpu_ms in day_pieces(span, now, since, until):
            totals[(day, key)] += gpu_ms
            counts[(day, key)] += 1
    return [
        UsageRow(day, key, totals[(day, key)], counts[(day, key)]) for day, key in sorted(totals)
    ]
