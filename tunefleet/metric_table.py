"""A metric history as a table: the API's CSV and the CLI's listing share this layout."""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tunefleet.csv_cells import safe_row

# The CSV's metric columns at most: metric names come from workers, and one column per
# distinct name let a worker that named new metrics in every report make a table of tens
# of thousands of columns (issue 23). The names reported most often are kept.
MAX_CSV_METRICS = 128
# Lines formatted per piece of the CSV, so a long one is written out piece by piece.
CSV_LINES_PER_PIECE = 500

Point = Mapping[str, Any]  # {"attempt", "step", "at", "values": {name: number}}


def _rank(name: str) -> tuple[int, str]:
    """Table order: loss first, then other losses, then the rest by name."""
    return (0 if name == "loss" else 1 if "loss" in name.lower() else 2, name)


def in_step_order(points: Iterable[Point]) -> list[Point]:
    return sorted(points, key=lambda p: (p["attempt"], p["step"]))


@dataclass(frozen=True, slots=True)
class MetricColumns:
    """The metric columns of a CSV (in table order) and how many names were left out."""

    names: list[str]
    omitted: int


def csv_columns(points: Iterable[Point], max_metrics: int | None = None) -> MetricColumns:
    """At most ``max_metrics`` (MAX_CSV_METRICS) columns: those in the most points, ties
    in table order."""
    if max_metrics is None:
        max_metrics = MAX_CSV_METRICS
    counts = Counter(name for point in points for name in point["values"])
    if len(counts) <= max_metrics:
        return MetricColumns(sorted(counts, key=_rank), 0)
    kept = sorted(counts, key=lambda n: (-counts[n], _rank(n)))[:max_metrics]
    return MetricColumns(sorted(kept, key=_rank), len(counts) - max_metrics)


def metrics_csv_pieces(points: Sequence[Point], columns: MetricColumns) -> Iterator[str]:
    """The CSV in pieces: the header, then up to CSV_LINES_PER_PIECE lines at a time, one
    line per point (attempt, then step order), blank where a report lacked a metric."""
    names = columns.names
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(safe_row(["attempt", "step", "at", *names]))
    ordered = in_step_order(points)
    for start in range(0, len(ordered), CSV_LINES_PER_PIECE):
        for point in ordered[start : start + CSV_LINES_PER_PIECE]:
            values = point["values"]
            cells = [repr(float(values[n])) if n in values else "" for n in names]
            writer.writerow(safe_row([point["attempt"], point["step"], point["at"]]) + cells)
        yield out.getvalue()
        out.seek(0)
        out.truncate()
    if out.tell():
        yield out.getvalue()


def metrics_csv(points: Sequence[Point], max_metrics: int | None = None) -> str:
    """The whole CSV as one text (the CLI's ``--csv``)."""
    return "".join(metrics_csv_pieces(points, csv_columns(points, max_metrics)))
