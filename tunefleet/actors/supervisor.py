"""Supervisor: the periodic health check (every ``health_check_interval_s``). It
removes offline ephemeral workers after their retention and loses a worker whose
heartbeat deadline passed if that deadline's own timer was missed.

It is not the only owner of time: each timer lives with the actor whose state it
guards (the table in docs/design.md, "Time")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import structlog

from tunefleet.actors import messages as m
from tunefleet.actors.clock import Timer
from tunefleet.actors.runtime import Actor
from tunefleet.fsm.worker import WorkerState

if TYPE_CHECKING:
    from tunefleet.actors.context import FleetContext

log = structlog.get_logger(__name__)


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
            if worker.heartbeat.expired() and worker.state != WorkerState.OFFLINE:
                worker.tell(m.HeartbeatExpired())
            rec = worker.rec
            if (
                rec.worker_type == "ephemeral"
                and worker.state == WorkerState.OFFLINE
                and rec.offline_at is not None
                and now - rec.offline_at >= retention
            ):
                log.info("removing offline ephemeral worker", worker_id=worker.worker_id)
                await self._remove_worker(
                    worker.worker_id, "offline ephemeral worker past retention"
                )
