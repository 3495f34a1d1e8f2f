"""A worker's GPU health as the orchestrator keeps it, and what an unhealthy reading
does: it quarantines the worker (issue 26, item 4).

The rules are tunefleet/gpu_health.py; this is what the worker actor does with them.
Health lives in memory (the worker record): it is judged again from the next heartbeat
after a restart, within one heartbeat interval. Only tunefleet's agent sends a reading;
a worker whose agent never did (SimpleTuner's) has no health: null, never "unhealthy".

Quarantine is the one lifecycle fact (fsm/worker.py) that keeps a bad machine out of
matching, whoever found it bad: failures there (quarantine_policy.py), an admin, or a
reading that turns unhealthy. Health itself only informs: ``degraded`` is shown, never
acted on. A quarantine outlives the fault that caused it: GPUs that read healthy again
do not release the worker (an Xid or an ECC error that went away after a reset is a
machine to look at first); an admin does (``tunefleet workers release``). A reading is
acted on when it *turns* unhealthy (and once after a restart, where the level starts
unknown): a worker an admin released while its GPUs still read unhealthy is taken at
their word until the reading turns unhealthy again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from tunefleet.actors.worker_quarantine import AUTOMATIC, quarantine
from tunefleet.audit import AuditKind
from tunefleet.fsm.worker import WorkerState
from tunefleet.gpu_health import Health

if TYPE_CHECKING:
    from tunefleet.actors import messages as m
    from tunefleet.actors.context import FleetContext
    from tunefleet.actors.worker_actor import WorkerActor

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


def quarantine_reason(health: Health | None) -> str | None:
    """Why this worker is quarantined for its GPUs' health, or None (it takes jobs):
    "GPU health: Xid 79 on GPU 1"."""
    if health is None or health.takes_jobs:
        return None
    return f"GPU health: {health.reason}"


def health_moves(worker: WorkerActor, msg: m.HeartbeatReceived) -> HealthChange | None:
    """The change of health level this heartbeat brings (audited, and an unhealthy one
    quarantines: not answered at once)."""
    if worker.state == WorkerState.OFFLINE:
        return None
    return level_change(worker.rec.health, worker.rec.judge(msg.gpu_health))


async def on_heartbeat(worker: WorkerActor, msg: m.HeartbeatReceived) -> bool:
    """A heartbeat, with what a change of health level brings: the audit and count, and
    the quarantine of a worker whose reading turned unhealthy (none if it already is)."""
    change = health_moves(worker, msg)
    alive = worker.on_heartbeat(msg)
    if not alive or change is None:
        return alive
    await report_change(worker.ctx, worker.worker_id, change)
    reason = quarantine_reason(change.now)
    if reason is not None and not worker.quarantined:
        await quarantine(worker, reason, AUTOMATIC)
    return alive


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
