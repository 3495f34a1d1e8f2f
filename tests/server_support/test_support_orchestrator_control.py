"""Who controls the orchestrator: the one function the local runner's isolation asks.
With users, it is the user whose role is admin, whatever their token holds."""

from __future__ import annotations

from tunefleet.http import auth
from tunefleet.http.auth import ALL_PERMISSIONS, ApiPrincipal
from tunefleet.http.orchestrator_control import controls_orchestrator
from tunefleet.http.roles import ROLES


def principal(role: str, *permissions: str) -> ApiPrincipal:
    return ApiPrincipal("1", "probe", frozenset(permissions), user="u", role=role)


def test_a_user_whose_role_is_admin_controls_the_orchestrator() -> None:
    assert controls_orchestrator(principal("admin", *ALL_PERMISSIONS))
    # A narrowed token of theirs still does: its permissions bound what it may ask.
    assert controls_orchestrator(principal("admin", "queue.submit", "queue.local"))


def test_no_other_role_does_whatever_the_token_holds() -> None:
    for role in (r for r in ROLES if r != "admin"):
        assert not controls_orchestrator(principal(role, *ALL_PERMISSIONS)), role
    assert not controls_orchestrator(principal("", *ALL_PERMISSIONS))  # no user


def test_one_implementation_answers_every_policy() -> None:
    assert controls_orchestrator is auth.controls_orchestrator
