"""How often ``Client.wait`` asks about a job: a pure policy, tested on its own.

Quick at first (a short job ends in seconds and should be seen to), then slower, so that
a nine-hour run waited on by a pipeline costs the orchestrator a request every
``max_s`` seconds, not every second.
"""

from __future__ import annotations

INITIAL_S = 1.0
FACTOR = 1.5
MAX_S = 30.0


def poll_delay(
    polls: int, *, initial_s: float = INITIAL_S, factor: float = FACTOR, max_s: float = MAX_S
) -> float:
    """Seconds to sleep before poll number ``polls + 1`` (``polls`` done so far, from 0):
    ``initial_s`` growing by ``factor`` each time, never above ``max_s``."""
    if polls <= 0:
        return min(initial_s, max_s)
    # Capped before the power overflows: factor**polls is past max_s long before.
    exponent = min(polls, 64)
    return min(max_s, initial_s * factor**exponent)


def next_sleep(polls: int, remaining_s: float | None, **policy: float) -> float:
    """The delay, cut to what is left of the caller's timeout (never negative)."""
    delay = poll_delay(polls, **policy)
    return delay if remaining_s is None else max(0.0, min(delay, remaining_s))
