"""When a crashing actor is restarted, when it is given up on, and who hears of it."""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from tunefleet.actors.clock import Clock

if TYPE_CHECKING:
    from tunefleet.actors.runtime import Actor

log = structlog.get_logger(__name__)

# Called with the failed actor (already stopped) and the error; may be async.
FailureCallback = Callable[["Actor", Exception], object]


class RestartPolicy:
    """At most `max_restarts` crashes per actor within `restart_window_s` seconds of
    the clock's monotonic time; one more and the actor is given up on."""

    def __init__(
        self,
        clock: Clock,
        max_restarts: int,
        restart_window_s: float,
        on_actor_failed: FailureCallback | None,
    ) -> None:
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, not {max_restarts}")
        if restart_window_s <= 0:
            raise ValueError(f"restart_window_s must be > 0, not {restart_window_s}")
        self.clock = clock
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self._on_actor_failed = on_actor_failed

    def record_crash(self, crash_times: deque[float]) -> bool:
        """Note a crash now in `crash_times`; True if the actor may be restarted."""
        now = self.clock.monotonic()
        crash_times.append(now)
        horizon = now - self.restart_window_s
        while crash_times[0] <= horizon:  # never empties: `now` is inside the window
            crash_times.popleft()
        return len(crash_times) <= self.max_restarts

    async def actor_failed(self, actor: Actor, error: Exception, reason: str) -> None:
        """Log the failure and tell the callback; never raises, never stays silent."""
        log.error(
            "actor failed and was stopped",
            actor=actor.name,
            reason=reason,
            error=repr(error),
            max_restarts=self.max_restarts,
            restart_window_s=self.restart_window_s,
            exc_info=error,
        )
        if self._on_actor_failed is None:
            return
        try:
            outcome = self._on_actor_failed(actor, error)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception as callback_error:
            log.error(
                "on_actor_failed raised",
                actor=actor.name,
                error=repr(callback_error),
                exc_info=callback_error,
            )
