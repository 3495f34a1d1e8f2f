"""A worker's GPU health as the orchestrator keeps it, and the one seam through which an
unhealthy worker stops taking jobs (issue 26, item 4).

The rules are tunefleet/gpu_health.py; this is what the worker actor does with them.
Health lives in memory (the worker record): it is judged again from the next heartbeat
after a restart, within one heartbeat interval. Only tunefleet's agent sends a reading;
a worker whose agent never did (SimpleTuner's) has no health: null, never "unhealthy".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from tunefleet.audit import AuditKind
from tunefleet.gpu_health import Health

if TYPE_CHECKING:
    from tunefleet.actors.context import FleetContext

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class HealthChange:
    """The level moved (audited and counted once); ``now`` is the health in force."""

    before: str | None
    now: Health


def level_change(current: Health | None, new: Health | None) -> HealthChange | None:
    """A change of level (not of wording: a temperature that moves a degree is no news)."""
    if new is None:
        return None
    before = current.level.value if current is not None else None
    if before == new.level.value:
        return None
    return HealthChange(before, new)


def hold_reason(health: Health | None) -> str | None:
    """THE seam: why this worker takes no new job for its GPUs' health, or None. Its
    current job goes on; it stays connected. At merge, h-badmachines' quarantine
    (`quarantine(worker_id, reason)`) takes this reason; until then the worker actor
    keeps the worker out of matching with it, and wait reasons quote it."""
    if health is None or health.takes_jobs:
        return None
    return f"unhealthy: {health.reason}"


async def report_change(ctx: FleetContext, worker_id: str, change: HealthChange) -> None:
    """Once per change of level: audited (worker.health), counted, logged."""
    health = change.now
    ctx.metrics.health_changes.labels(health=health.level.value).inc()
    await ctx.audit.record(
        AuditKind.WORKER_HEALTH,
        actor=worker_id,
        target=worker_id,
        health=health.level.value,
        was=change.before,
        reason=health.reason,
        serve_anyway=True,  # a fact the agent reported: never refused
    )
    log.warning(
        "worker gpu health changed",
        worker_id=worker_id,
        health=health.level.value,
        reason=health.reason,
    )
