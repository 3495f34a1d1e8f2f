"""Supervisor: owns time. Heartbeat deadlines, and the periodic health check that
removes offline ephemeral workers after their retention and catches anything a
timer missed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import structlog

from tunefleet.actors import messages as m
from tunefleet.actors.clock import Clock, Timer
from tunefleet.actors.runtime import Actor

if TYPE_CHECKING:
    from tunefleet.actors.context import FleetContext

log = structlog.get_logger(__name__)


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


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """Run the periodic health check now."""


class Supervisor(Actor):
    def __init__(
        self, ctx: FleetContext, remove_worker: Callable[[str, str], Awaitable[None]]
    ) -> None:
        super().__init__("supervisor")
        self.ctx = ctx
        self._remove_worker = remove_worker
        self._timer: Timer | None = None

    async def on_start(self) -> None:
        self._schedule()

    async def on_stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _schedule(self) -> None:
        self._timer = self.ctx.clock.call_later(
            self.ctx.settings.health_check_interval_s, partial(self.try_tell, HealthCheck())
        )

    async def receive(self, message: object) -> object:
        if not isinstance(message, HealthCheck):
            raise TypeError(f"Supervisor cannot handle {type(message).__name__}")
        try:
            await self.health_check()
        finally:
            self._schedule()
        return None

    async def health_check(self) -> None:
        now = self.ctx.clock.time()
        retention = self.ctx.settings.ephemeral_retention_s
        for worker in list(self.ctx.workers.values()):
            if worker.heartbeat.expired() and worker.state != "offline":
                worker.tell(m.HeartbeatExpired())
            rec = worker.rec
            if (
                rec.worker_type == "ephemeral"
                and worker.state == "offline"
                and rec.offline_at is not None
                and now - rec.offline_at >= retention
            ):
                log.info("removing offline ephemeral worker", worker_id=worker.worker_id)
                await self._remove_worker(
                    worker.worker_id, "offline ephemeral worker past retention"
                )
