"""The worker actor's heartbeat deadline: one timer per worker, precise yet cheap to
push back, so a heartbeat moves a number instead of a timer."""

from __future__ import annotations

from collections.abc import Callable

from tunefleet.actors.clock import Clock, Timer


class Deadline:
    """A precise deadline that is cheap to push back.

    The timer is armed for the current deadline; extending only moves a number, and
    the timer re-arms itself when it fires early. A heartbeat therefore costs no timer
    churn, yet expiry happens at the deadline itself, not a sweep later.
    """

    __slots__ = ("_clock", "_on_expire", "_timer", "deadline")

    def __init__(self, clock: Clock, on_expire: Callable[[], None]) -> None:
        self._clock = clock
        self._on_expire = on_expire
        self._timer: Timer | None = None
        self.deadline: float | None = None

    def extend(self, seconds: float) -> None:
        self.deadline = self._clock.monotonic() + seconds
        if self._timer is None or self._timer.when > self.deadline:
            self._arm()

    def expired(self) -> bool:
        return self.deadline is not None and self._clock.monotonic() >= self.deadline

    def cancel(self) -> None:
        self.deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.deadline is not None:
            self._timer = self._clock.call_at(self.deadline, self._fire)

    def _fire(self) -> None:
        self._timer = None
        if self.deadline is None:
            return
        if self._clock.monotonic() < self.deadline:
            self._arm()
        else:
            self._on_expire()
