"""Helpers the domain repositories share. Everything here runs on the DB thread."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import peewee as pw

Now = Callable[[], float]
T = TypeVar("T")

MAX_PAGE = 1000


@dataclass(frozen=True, slots=True)
class JobOwner:
    """Jobs of one user, of one team, or of both (None: any)."""

    user_name: str | None = None
    team_name: str | None = None


@dataclass(frozen=True, slots=True)
class Viewer:
    """Whose jobs someone who is not an admin sees: their own and their teams'."""

    user_name: str
    team_names: frozenset[str]


class Connector(Protocol):
    """What the Store needs of a database: storage.database.Database (SQLite,
    PostgreSQL) or storage.memory.MemoryDatabase (the actors' tests)."""

    async def read(self, fn: Callable[[], T]) -> T: ...
    async def write(
        self, fn: Callable[[], T], *, after_commit: Callable[[T], None] | None = None
    ) -> T: ...
    def on_rollback(self, forget: Callable[[], None]) -> None: ...
    def on_commit(self, done: Callable[[], None]) -> None: ...


def state_set(expected: str | Collection[str]) -> list[str]:
    """A CAS expectation: one state or any of several."""
    if isinstance(expected, str):
        return [expected]
    states = list(expected)
    if not states:
        raise ValueError("expected at least one state to compare against")
    return states


def checked_fields(
    model: type[pw.Model], fields: Mapping[str, Any], *, forbidden: Collection[str] = ()
) -> dict[str, Any]:
    """`fields` after making sure each names a settable column of `model`.

    Unknown names are a programming error (a typo would silently store nothing), and
    the forbidden ones (ids, `state`) have their own operation (create, CAS).
    """
    names = fields.keys()
    # A subset test against the model's names, kept per model: no set built per call.
    known = _FIELD_NAMES.get(model)
    if known is None:
        known = _FIELD_NAMES[model] = frozenset(model._meta.fields)
    if not names <= known:
        unknown = names - known
        raise TypeError(f"{model.__name__} has no field(s) {', '.join(sorted(unknown))}")
    if not names.isdisjoint(forbidden):
        blocked = sorted(name for name in names if name in forbidden)
        raise TypeError(f"{model.__name__} field(s) {', '.join(blocked)} cannot be set here")
    return dict(fields)


_FIELD_NAMES: dict[type[pw.Model], frozenset[str]] = {}


def page(limit: int, offset: int) -> tuple[int, int]:
    """Clamp paging arguments so one request cannot read a whole table."""
    if limit < 0 or offset < 0:
        raise ValueError("limit and offset must not be negative")
    return min(limit, MAX_PAGE), offset
