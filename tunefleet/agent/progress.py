"""Reading the progress lines a trainer appends to TUNEFLEET_PROGRESS_FILE.

Each line is one JSON object, e.g. `{"step": 10, "total": 200, "loss": 0.42}`. The
latest value of every key wins, so a trainer may report metrics on separate lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeGuard

# A runaway trainer could write one endless line; past this it is not progress.
MAX_PROGRESS_LINE_BYTES = 64 * 1024
_READ_CHUNK_BYTES = 1024 * 1024


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def with_percent(progress: dict[str, Any]) -> dict[str, Any]:
    """Adds `percent` when step and total are known (a trainer's own percent otherwise)."""
    step, total = progress.get("step"), progress.get("total")
    if _is_number(step) and _is_number(total) and total > 0:
        return {**progress, "percent": round(min(100.0, 100.0 * step / total), 1)}
    return progress


class ProgressTail:
    """Follows a progress file by offset; `poll()` reads what was appended since."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.malformed = 0  # lines that were not a JSON object
        self._offset = 0
        self._partial = b""
        self._merged: dict[str, Any] = {}

    @property
    def progress(self) -> dict[str, Any]:
        return with_percent(self._merged)

    def poll(self, final: bool = False) -> bool:
        """Read new complete lines; True when the merged progress changed.

        `final` also takes a last line the trainer did not end with a newline.
        """
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read(_READ_CHUNK_BYTES)
                while data:
                    self._offset += len(data)
                    self._partial += data
                    data = handle.read(_READ_CHUNK_BYTES) if final else b""
        except OSError:
            return False  # not created yet, or removed by the trainer: nothing new
        *lines, self._partial = self._partial.split(b"\n")
        if final and self._partial:
            lines.append(self._partial)
            self._partial = b""
        elif len(self._partial) > MAX_PROGRESS_LINE_BYTES:
            self._partial = b""
            self.malformed += 1
        before = dict(self._merged)
        for line in lines:
            self._take(line)
        return self._merged != before

    def _take(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
            self.malformed += 1
            return
        if not isinstance(record, dict):
            self.malformed += 1
            return
        self._merged.update(record)
