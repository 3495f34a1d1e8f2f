"""A job's progress: each report merged into the one object the job keeps, bounded.

Reports are partial (a trainer may send only ``loss`` one time and ``step`` the next), so
the job keeps their union. A worker that named new keys in every report grew that union
without end and every page was sent all of it again (issue 23): the union is bounded in
keys and in bytes as JSON (``Limits.max_progress_keys``, ``max_progress_bytes``), a
report that would pass either is refused whole, and the change is what pages are sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tunefleet.errors import BadRequest
from tunefleet.limits import Limits


class ProgressTooLarge(BadRequest):
    """The report would grow the job's progress past a bound; nothing of it is kept."""


@dataclass(frozen=True, slots=True)
class MergedProgress:
    progress: dict[str, Any]
    # The keys the report added or changed: what live pages merge into their copy.
    changed: dict[str, Any]


def merge_progress(
    current: Mapping[str, Any] | None, report: Mapping[str, Any], limits: Limits
) -> MergedProgress:
    """``current`` with ``report`` merged in, or ProgressTooLarge. Zero bounds: none."""
    current = current or {}
    changed = {k: v for k, v in report.items() if k not in current or _differs(current[k], v)}
    if not changed:
        return MergedProgress(dict(current), {})
    merged = {**current, **changed}
    max_keys = limits.max_progress_keys
    if max_keys and len(merged) > max_keys:
        raise ProgressTooLarge(
            f"progress: the job's progress would hold {len(merged)} keys, over the "
            f"server's limit of {max_keys} (--max-progress-keys); report the same keys "
            "each time rather than new ones"
        )
    max_bytes = limits.max_progress_bytes
    if max_bytes:
        size = len(json.dumps(merged, separators=(",", ":"), ensure_ascii=False).encode())
        if size > max_bytes:
            raise ProgressTooLarge(
                f"progress: the job's progress would be {size} bytes as JSON, over the "
                f"server's limit of {max_bytes} (--max-progress-bytes); send fewer or "
                "smaller values"
            )
    return MergedProgress(merged, changed)


def _differs(old: Any, new: Any) -> bool:
    # 1 == 1.0 == True in Python; a report that turns 1 into true has changed it.
    return type(old) is not type(new) or bool(old != new)
