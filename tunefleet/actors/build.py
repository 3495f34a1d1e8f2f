"""build_fleet: the one place a Fleet is wired (storage, persistence, context, actors).

The server (http/app.py), the orchestrator tests' kit and the benchmarks all build their
fleet here, so a new part of the context is added once and the three cannot drift.
What differs between them is a parameter: the store (SQLite, PostgreSQL or in memory),
the clock (real or fake), the settings, and the parts a caller shares with others (the
server keeps one metrics registry and event hub across a standby's takeover).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tunefleet.actors.context import FleetContext, FleetSettings
from tunefleet.actors.events import EventHub
from tunefleet.actors.fleet import Fleet
from tunefleet.actors.persistence import Persistence
from tunefleet.actors.runtime import ActorSystem
from tunefleet.metrics import Metrics

if TYPE_CHECKING:
    from tunefleet.actors.clock import Clock
    from tunefleet.artifacts.service import Artifacts
    from tunefleet.audit import AuditLog
    from tunefleet.storage.store import Store
    from tunefleet.webhooks.outbox import WebhookOutbox


def build_fleet(
    store: Store,
    clock: Clock,
    settings: FleetSettings,
    audit: AuditLog,
    *,
    metrics: Metrics | None = None,
    hub: EventHub | None = None,
    artifacts: Artifacts | None = None,
    webhooks: WebhookOutbox | None = None,
) -> Fleet:
    """A Fleet over ``store``, not yet started: ``await fleet.start()`` builds the
    actors from storage. Without ``metrics`` or ``hub`` it gets fresh ones of its own."""
    ctx = FleetContext(
        settings=settings,
        clock=clock,
        system=ActorSystem(clock),
        persistence=Persistence(store, audit, webhooks),
        audit=audit,
        hub=hub if hub is not None else EventHub(),
        metrics=metrics if metrics is not None else Metrics(),
        artifacts=artifacts,
    )
    return Fleet(ctx)
