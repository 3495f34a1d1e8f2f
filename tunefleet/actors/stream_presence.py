"""The reconnect grace: how long a worker whose stream closed keeps a job it has not
acknowledged.

A job_submit written to a stream that closes before the agent acknowledges it may have
reached nobody. Waiting out the acknowledgement timeout (60 s) for that costs the job a
minute; giving it away at once would take it from an agent that only lost its
connection for a moment and reconnects with the job in hand. So the worker actor starts
a short grace when the stream closes (or a job is pushed while it has none): if the
agent reconnects within it, it keeps the job as before; if not, the job goes back to
the queue. An agent that comes back later with the job is told to abandon it (its
registration's ``abandon_job``, and 409 on its reports), so the job never runs twice.

Generations make the timer cheap to restart: a timer that fires for an earlier close
(the agent reconnected and dropped again meanwhile) is ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tunefleet.actors.clock import Clock, Timer


class ReconnectGrace:
    """One worker's grace timer. ``on_expired(generation)`` runs on the clock's loop and
    must only tell the actor (no state is touched here)."""

    __slots__ = ("_clock", "_on_expired", "_timer", "generation", "grace_s")

    def __init__(self, clock: Clock, grace_s: float, on_expired: Callable[[int], object]) -> None:
        self._clock = clock
        self._on_expired = on_expired
        self._timer: Timer | None = None
        self.grace_s = grace_s
        self.generation = 0

    @property
    def running(self) -> bool:
        return self._timer is not None

    def start(self) -> None:
        """(Re)start the grace from now."""
        self.cancel()
        generation = self.generation
        self._timer = self._clock.call_later(self.grace_s, lambda: self._on_expired(generation))

    def cancel(self) -> None:
        """The stream is back (or the job is no longer held): nothing to wait for."""
        self.generation += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def expired(self, generation: int) -> bool:
        """Whether a timer firing for ``generation`` is the current one (then it is done)."""
        if generation != self.generation or self._timer is None:
            return False
        self._timer = None
        return True
