"""build_fleet wires one Fleet; what a caller shares with others is passed in, the rest is
the fleet's own."""

from __future__ import annotations

from typing import Any, cast

from tunefleet.actors.build import build_fleet
from tunefleet.actors.clock import FakeClock
from tunefleet.actors.context import FleetSettings
from tunefleet.actors.events import EventHub
from tunefleet.metrics import Metrics

# Building touches neither: the store is only handed to Persistence, the audit log kept.
STORE: Any = cast(Any, object())
AUDIT: Any = cast(Any, object())


def test_the_fleet_is_wired_over_the_given_store_clock_settings_and_audit() -> None:
    clock = FakeClock()
    settings = FleetSettings(heartbeat_timeout_s=7.0, local_runner=False)
    fleet = build_fleet(STORE, clock, settings, AUDIT)
    ctx = fleet.ctx
    assert ctx.persistence.store is STORE
    assert ctx.clock is clock and ctx.system.clock is clock
    assert ctx.settings is settings
    assert ctx.audit is AUDIT
    assert ctx.artifacts is None
    assert ctx.workers == {} and ctx.jobs == {}


def test_fleets_built_alone_count_and_publish_apart() -> None:
    first = build_fleet(STORE, FakeClock(), FleetSettings(), AUDIT).ctx
    second = build_fleet(STORE, FakeClock(), FleetSettings(), AUDIT).ctx
    assert first.metrics is not second.metrics
    assert first.hub is not second.hub


def test_shared_metrics_hub_and_artifacts_are_the_callers() -> None:
    """The server keeps one registry and hub across a standby's takeover."""
    metrics, hub, artifacts = Metrics(), EventHub(), cast(Any, object())
    ctx = build_fleet(
        STORE, FakeClock(), FleetSettings(), AUDIT, metrics=metrics, hub=hub, artifacts=artifacts
    ).ctx
    assert ctx.metrics is metrics
    assert ctx.hub is hub
    assert ctx.artifacts is artifacts
