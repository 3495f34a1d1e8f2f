"""Benchmarks that print numbers; never timed assertions.

Each benchmark is a module here with `run() -> list[dict]`, every row a dict with
exactly the keys of `Row`: `name`, `value` (a number), `unit`, `target` (a string
saying what good looks like, or None) and `note`. `python -m bench` runs the ones
listed in bench/__main__.py, prints a table per benchmark and writes
bench/results/<name>.json.
"""

from __future__ import annotations

from typing import TypedDict


class Row(TypedDict):
    name: str
    value: float
    unit: str
    target: str | None
    note: str


def row(name: str, value: float, unit: str, target: str | None, note: str) -> Row:
    return {"name": name, "value": value, "unit": unit, "target": target, "note": note}
