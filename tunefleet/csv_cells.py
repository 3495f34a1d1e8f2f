"""Cells a spreadsheet will not run: every CSV tunefleet writes goes through here.

Text that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is read by
spreadsheets as a formula (CSV injection); OWASP's advice is a leading ``'``. Metric
names, and any other text a worker or user chose, can start that way. A real number
written as text (``-0.5``) is left as it is, so it stays a number.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")

Cell = str | int | float


def safe_cell(value: object) -> Cell:
    """``value`` as a CSV cell: None blank, numbers as they are, text escaped if needed."""
    if value is None:
        return ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    text = str(value)
    if text.startswith(_FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


def safe_row(values: Iterable[object]) -> list[Cell]:
    return [safe_cell(value) for value in values]
