"""Roles as bundles of permissions; a token narrowed to its user's ceiling."""

from __future__ import annotations

from tunefleet.http.auth import ALL_PERMISSIONS, ApiPrincipal, controls_orchestrator
from tunefleet.http.principals import principal_of_token
from tunefleet.http.roles import ROLE_PERMISSIONS, ROLES, beyond_ceiling, user_ceiling
from tunefleet.storage.rows import ApiTokenRow, UserRow
from tunefleet.storage.store_users import Membership, UserFacts


def test_roles_bundle_permissions_and_separate_grants_stay_separate() -> None:
    assert ROLES == ("viewer", "researcher", "lead", "admin")
    assert ROLE_PERMISSIONS["viewer"] == frozenset()
    assert ROLE_PERMISSIONS["researcher"] == {"queue.submit"}
    assert ROLE_PERMISSIONS["lead"] == {"queue.submit", "queue.approve", "usage.read"}
    assert ROLE_PERMISSIONS["admin"] == set(ALL_PERMISSIONS)
    # queue.command and queue.local come with no role but admin's: a grant of their own.
    assert user_ceiling("researcher", ["queue.command"]) == {"queue.submit", "queue.command"}
    # A grant is only ever one of the separate ones, and an unknown role holds nothing.
    assert user_ceiling("viewer", ["admin.workers"]) == frozenset()
    assert user_ceiling("root", ["queue.local"]) == {"queue.local"}
    assert beyond_ceiling("lead", [], ["audit.read", "queue.submit", "admin.workers"]) == [
        "admin.workers",
        "audit.read",
    ]


def _user(role: str, grants: list[str]) -> UserRow:
    return UserRow(2, "alice", role, grants, False, None, 1.0, 1.0)


def test_a_tokens_permissions_are_narrowed_to_its_users_ceiling() -> None:
    token = ApiTokenRow(5, "laptop", "h", list(ALL_PERMISSIONS), 1.0, None, None, user_id=2)
    teams = (Membership("alice", "ml", True), Membership("alice", "vision", False))
    principal = principal_of_token(token, UserFacts(_user("lead", ["queue.local"]), teams))
    assert principal.permissions == {"queue.submit", "queue.approve", "usage.read", "queue.local"}
    assert (principal.user, principal.role, principal.user_id) == ("alice", "lead", 2)
    assert (principal.teams, principal.default_team) == ({"ml", "vision"}, "ml")
    assert (principal.token_id, principal.name) == ("5", "laptop")
    assert not controls_orchestrator(principal)
    narrow = ApiTokenRow(6, "ro", "h2", [], 1.0, None, None, user_id=2)
    assert principal_of_token(narrow, UserFacts(_user("admin", []), ())).permissions == set()


def test_controls_orchestrator_means_the_admin_role() -> None:
    admin = ApiPrincipal("1", "admin", frozenset(), user="root", role="admin")
    assert controls_orchestrator(admin)  # even through a token narrowed to nothing
    assert not controls_orchestrator(ApiPrincipal("2", "ci", frozenset(ALL_PERMISSIONS)))
