"""A worker's quarantine, for its WorkerActor: the steps around the lifecycle's
``quarantine`` and ``unquarantine`` (fsm/worker.py) and the automatic decision
(quarantine_policy.py), kept out of worker_actor.py.

A quarantined worker takes no new job, keeps its current one and stays connected; an
ephemeral one is told to exit (now when idle, after its job otherwise). The reason is
stored with the worker, audited, counted in /metrics and shown wherever the worker is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from tunefleet.actors import messages as m
from tunefleet.actors.quarantine_policy import AttemptEnd, quarantine_reason, remember

__all__ = ["AUTOMATIC", "AttemptEnd", "attempt_ended", "quarantine", "release"]
from tunefleet.audit import AuditKind
from tunefleet.errors import Conflict
from tunefleet.fsm.failure_kinds import FailureKind
from tunefleet.fsm.worker import WORKER_LIFECYCLE
from tunefleet.protocol.events import ShutdownEvent

if TYPE_CHECKING:
    from tunefleet.actors.worker_actor import WorkerActor

log = structlog.get_logger(__name__)

AUTOMATIC = "orchestrator"  # the actor of an automatic quarantine
# Jobs that failed here and then completed elsewhere, remembered per worker.
_KEPT_SUCCESSES = 64


async def quarantine(worker: WorkerActor, reason: str, actor: str) -> dict[str, Any]:
    """Quarantine ``worker`` (409 if it already is)."""
    if worker.quarantined:
        raise Conflict(
            f"worker {worker.worker_id} is already quarantined ({worker.rec.quarantine_reason}); "
            "release it first to quarantine it again"
        )
    WORKER_LIFECYCLE.fire(worker, "quarantine")
    now = worker.ctx.clock.time()
    worker.rec.quarantine_reason, worker.rec.quarantined_at = reason, now
    await worker._persist(quarantine_reason=reason, quarantined_at=now)
    await worker.ctx.audit.record(
        AuditKind.WORKER_QUARANTINED, actor=actor, target=worker.worker_id, reason=reason
    )
    how = "automatic" if actor == AUTOMATIC else "manual"
    worker.ctx.metrics.quarantines.labels(how=how).inc()
    log.warning("worker quarantined", worker_id=worker.worker_id, reason=reason, by=actor)
    if worker.rec.worker_type == "ephemeral" and worker.current_job_id is None:
        worker.push(ShutdownEvent(reason=f"worker quarantined: {reason}"))
    worker._announce()
    return worker.snapshot()


async def release(worker: WorkerActor, actor: str) -> dict[str, Any]:
    """End ``worker``'s quarantine (409 if it is not quarantined)."""
    if not worker.quarantined:
        raise Conflict(f"worker {worker.worker_id} is not quarantined; nothing to release")
    reason = worker.rec.quarantine_reason
    WORKER_LIFECYCLE.fire(worker, "unquarantine")
    worker.rec.quarantine_reason = worker.rec.quarantined_at = None
    # A fresh start: the failures that led here no longer count against it.
    worker.attempt_ends = ()
    await worker._persist(quarantine_reason=None, quarantined_at=None)
    await worker.ctx.audit.record(
        AuditKind.WORKER_RELEASED, actor=actor, target=worker.worker_id, was=reason
    )
    worker._announce()
    return worker.snapshot()


def on_stream_opened(worker: WorkerActor) -> None:
    """A quarantined ephemeral worker that (re)connects with nothing to run is told to
    exit again: it would only wait for a job it will never get."""
    if worker.quarantined and worker.rec.worker_type == "ephemeral" and not worker.current_job_id:
        worker.push(ShutdownEvent(reason=f"worker quarantined: {worker.rec.quarantine_reason}"))


def remember_end(worker: WorkerActor, msg: m.AttemptEnded) -> None:
    """Note the end; a completed one (no await: it never quarantines) needs no more."""
    kind = FailureKind(msg.kind) if msg.kind else None
    worker.attempt_ends = remember(
        worker.attempt_ends, AttemptEnd(msg.at, msg.job_id, kind, msg.signature)
    )


async def attempt_ended(worker: WorkerActor, msg: m.AttemptEnded) -> None:
    remember_end(worker, msg)
    await _consider(worker)


async def succeeded_elsewhere(worker: WorkerActor, job_id: str) -> None:
    worker.succeeded_elsewhere[job_id] = None
    while len(worker.succeeded_elsewhere) > _KEPT_SUCCESSES:
        del worker.succeeded_elsewhere[next(iter(worker.succeeded_elsewhere))]
    await _consider(worker)


async def _consider(worker: WorkerActor) -> None:
    if worker.quarantined:
        return
    reason = quarantine_reason(
        worker.attempt_ends,
        worker.succeeded_elsewhere.keys(),
        worker.ctx.clock.time(),
        worker.ctx.settings.quarantine,
    )
    if reason is not None:
        await quarantine(worker, reason, AUTOMATIC)
