"""Who controls the orchestrator: the one function the local runner's isolation asks."""

from __future__ import annotations

from tunefleet.http.auth import ALL_PERMISSIONS, ApiPrincipal
from tunefleet.http.orchestrator_control import controls_orchestrator


def principal(*permissions: str) -> ApiPrincipal:
    return ApiPrincipal("1", "probe", frozenset(permissions))


def test_a_token_with_every_permission_controls_the_orchestrator() -> None:
    assert controls_orchestrator(principal(*ALL_PERMISSIONS))


def test_a_token_lacking_any_permission_does_not() -> None:
    for missing in ALL_PERMISSIONS:
        held = [p for p in ALL_PERMISSIONS if p != missing]
        assert not controls_orchestrator(principal(*held)), missing
    assert not controls_orchestrator(principal("queue.submit", "queue.command", "queue.local"))
