"""One log line per interval for an event a client can repeat at will (a refused
connection, a failed accept), with the count of those held back since the last line:
a flood of them must not become a flood of log (issue 23: 85 MB in 50 s)."""

from __future__ import annotations

import time
from collections.abc import Callable


class LogGate:
    """Lets the first event of each ``interval_s`` be logged and counts the rest."""

    __slots__ = ("_held", "_interval_s", "_next_at", "_now")

    def __init__(self, interval_s: float = 10.0, now: Callable[[], float] = time.monotonic):
        self._interval_s = interval_s
        self._now = now
        self._next_at = float("-inf")
        self._held = 0

    def passes(self) -> int | None:
        """None: stay quiet (the event is counted). Otherwise log now, saying how many
        were held back since the last line (the number returned)."""
        now = self._now()
        if now < self._next_at:
            self._held += 1
            return None
        held, self._held = self._held, 0
        self._next_at = now + self._interval_s
        return held
