"""A metric history as a table: the API's CSV and the CLI's listing share this layout."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# What a spreadsheet would run as a formula when a cell starts with it (metric names
# come from workers).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

Point = Mapping[str, Any]  # {"attempt", "step", "at", "values": {name: number}}


def metric_names(points: Iterable[Point]) -> list[str]:
    """Every metric named, loss first, then other losses, then the rest by name."""
    names = {name for point in points for name in point["values"]}

    def rank(name: str) -> tuple[int, str]:
        return (0 if name == "loss" else 1 if "loss" in name.lower() else 2, name)

    return sorted(names, key=rank)


def in_step_order(points: Iterable[Point]) -> list[Point]:
    return sorted(points, key=lambda p: (p["attempt"], p["step"]))


def metrics_csv(points: Sequence[Point]) -> str:
    """One line per point (attempt, then step order), one column per metric; blank
    where a report lacked that metric."""
    names = metric_names(points)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["attempt", "step", "at", *(_safe(name) for name in names)])
    for point in in_step_order(points):
        values = point["values"]
        cells = [repr(float(values[n])) if n in values else "" for n in names]
        writer.writerow([point["attempt"], point["step"], point["at"], *cells])
    return out.getvalue()


def _safe(text: str) -> str:
    return f"'{text}" if text.startswith(_FORMULA_START) else text
