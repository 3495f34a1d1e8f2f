"""Who already controls the orchestrator: the one answer every policy that depends on it
asks (today the local runner's isolation, docs/operations.md "Who can run what")."""

from __future__ import annotations

from tunefleet.http.auth import ALL_PERMISSIONS, ApiPrincipal

_ADMIN_PERMISSIONS = frozenset(ALL_PERMISSIONS)


def controls_orchestrator(principal: ApiPrincipal) -> bool:
    """Whether ``principal`` already controls the orchestrator, so that nothing it could
    run on the orchestrator's machine gives it more: a token holding every permission,
    as the admin token printed at the first start does. (With users and roles, this
    becomes "the user's role is admin".)"""
    return principal.permissions >= _ADMIN_PERMISSIONS
