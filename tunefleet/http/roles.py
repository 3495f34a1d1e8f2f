"""Roles: named bundles of permissions, and what a user's token may hold.

A user's ceiling is their role's bundle plus their separate grants (``queue.command``
and ``queue.local``, which choosing a program and running on the orchestrator's own
machine need, and which no role but admin carries). A token holds its own permissions
narrowed to that ceiling, so lowering a role lowers every token of the user at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Literal, get_args

from tunefleet.http.auth import (
    ALL_PERMISSIONS,
    QUEUE_APPROVE,
    QUEUE_COMMAND,
    QUEUE_LOCAL,
    QUEUE_SUBMIT,
    USAGE_READ,
)

RoleName = Literal["viewer", "researcher", "lead", "admin"]
ROLES: tuple[str, ...] = get_args(RoleName)
ADMIN = "admin"

ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    # Reads what they may see: their own jobs and their teams'; no permission needed.
    "viewer": frozenset(),
    # Submits, and cancels their own jobs.
    "researcher": frozenset({QUEUE_SUBMIT}),
    # Also approves their teams' jobs and reads their teams' usage (both built later),
    # and cancels their teams' jobs.
    "lead": frozenset({QUEUE_SUBMIT, QUEUE_APPROVE, USAGE_READ}),
    "admin": frozenset(ALL_PERMISSIONS),
}
SEPARATE_GRANTS: tuple[str, ...] = (QUEUE_COMMAND, QUEUE_LOCAL)
GrantName = Literal["queue.command", "queue.local"]


@lru_cache(maxsize=64)
def _ceiling(role: str, grants: frozenset[str]) -> frozenset[str]:
    return ROLE_PERMISSIONS.get(role, frozenset()) | (grants & frozenset(SEPARATE_GRANTS))


def user_ceiling(role: str, grants: Iterable[str]) -> frozenset[str]:
    """Every permission a token of a user with ``role`` and ``grants`` may hold (an
    unknown role holds none)."""
    return _ceiling(role, frozenset(grants))


def beyond_ceiling(role: str, grants: Iterable[str], wanted: Iterable[str]) -> list[str]:
    """The permissions of ``wanted`` the user may not hold, in the documented order."""
    ceiling = user_ceiling(role, grants)
    asked = set(wanted)
    return [p for p in ALL_PERMISSIONS if p in asked and p not in ceiling]
