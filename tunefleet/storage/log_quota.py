"""Each attempt's log is bounded in bytes (``Limits.max_log_bytes_per_attempt``).

One worker token posting logs stored 1.87 GB in 40 s (issue 23). Lines are taken in order
while the attempt's total stays within its quota; from the first line that would pass it,
every later line of that attempt is dropped and counted, and one marker line (``seq`` -1,
stream ``notice``, so the unique (job, attempt, seq) index keeps it single) says so where
the log is read. Each line counts its UTF-8 bytes plus a row's overhead, so empty lines
are not free. Past the quota a batch costs one read and one write of the attempt's
counters (a batch sent again then counts again: the count is of lines refused).
Shared by the SQL repository and its in-memory twin; synchronous.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tunefleet.storage.store_jobs import LogLineLike

# What a stored line costs beyond its text: its row (ids, seq, time, stream) and index entries.
LINE_OVERHEAD_BYTES = 64
MARKER_SEQ = -1
MARKER_STREAM = "notice"


def line_cost(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass")) + LINE_OVERHEAD_BYTES


@dataclass(frozen=True, slots=True)
class LogAppend:
    """What became of a batch: lines stored, lines dropped past the quota, whether this
    batch stored the marker line, and whether the attempt's quota is reached."""

    stored: int
    dropped: int = 0
    marker: bool = False
    quota_reached: bool = False


@dataclass(frozen=True, slots=True)
class QuotaSplit:
    kept: list[LogLineLike]
    kept_bytes: int
    dropped: int
    # When the first dropped line was written (the marker line's time).
    first_dropped_at: float | None = None


@dataclass(frozen=True, slots=True)
class QuotaMarker:
    """The one line that says the attempt's quota was reached (a LogLineLike)."""

    seq: int
    stream: str
    line: str
    at: float


def split_at_quota(
    lines: Sequence[LogLineLike],
    stored_seqs: Collection[int],
    used_bytes: int,
    reached: bool,
    max_bytes: int,
) -> QuotaSplit:
    """The new lines (not stored yet, first of a seq in the batch) that fit; the rest of
    the new ones are dropped. ``reached``: the attempt dropped lines before, so it takes no
    more. A zero ``max_bytes`` is no quota."""
    seen = set(stored_seqs)
    kept: list[LogLineLike] = []
    kept_bytes = dropped = 0
    first_dropped_at: float | None = None
    for line in lines:
        if line.seq in seen:
            continue  # a retried batch's line: stored already, neither kept nor dropped
        seen.add(line.seq)
        if not reached:
            cost = line_cost(line.line)
            reached = bool(max_bytes) and used_bytes + kept_bytes + cost > max_bytes
            if not reached:
                kept.append(line)
                kept_bytes += cost
                continue
        dropped += 1
        if first_dropped_at is None:
            first_dropped_at = line.at
    return QuotaSplit(kept, kept_bytes, dropped, first_dropped_at)


def quota_marker(max_bytes: int, at: float) -> QuotaMarker:
    text = (
        f"[tunefleet] this attempt's log reached its quota of {_size(max_bytes)} "
        "(--max-log-bytes-per-attempt): later lines are dropped, and counted in the "
        "job's attempt_history (log_lines_dropped)"
    )
    return QuotaMarker(MARKER_SEQ, MARKER_STREAM, text, at)


def _size(n_bytes: int) -> str:
    """256 MiB as "256 MiB"; a size that is no whole unit stays in bytes."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n_bytes >= size and n_bytes % size == 0:
            return f"{n_bytes // size} {unit}"
    return f"{n_bytes} bytes"
