"""Users, teams and who belongs to which. Synchronous: these run on the DB thread.

Users and teams are never deleted nor renamed (a user is disabled instead), so jobs can
name theirs. One membership per user is the default team, the one a submit without
``team`` goes to; the repository keeps that true as members come and go. The last enabled
admin cannot be disabled or given another role: the check and the change are one write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import peewee as pw

from tunefleet.storage.errors import AlreadyExists, LastAdmin, Missing
from tunefleet.storage.models import Team, TeamMember, User, database_proxy
from tunefleet.storage.rows import TeamRow, UserRow, first_of, inserted, rows_of
from tunefleet.storage.statements import insert_row
from tunefleet.storage.store_base import Connector, Now

T = TypeVar("T")

# The role that controls the orchestrator (http/roles.py names every role's permissions).
ADMIN_ROLE = "admin"


@dataclass(frozen=True, slots=True)
class Membership:
    """A user in a team, by name; ``is_default``: the team their submits go to."""

    user: str
    team: str
    is_default: bool


@dataclass(frozen=True, slots=True)
class UserFacts:
    """What authenticating a request needs of a user: the row and their teams."""

    user: UserRow
    teams: tuple[Membership, ...]

    @property
    def default_team(self) -> str | None:
        return next((m.team for m in self.teams if m.is_default), None)


def unknown_user(name: str) -> Missing:
    return Missing(f"unknown user: {name}; list users with GET /api/admin/users")


def unknown_team(name: str) -> Missing:
    return Missing(f"unknown team: {name}; list teams with GET /api/admin/teams")


def loses_an_admin(row: UserRow, *, role: str | None = None, disabled: bool = False) -> bool:
    """Whether a change (a new ``role``, or disabling) leaves ``row`` no longer an enabled
    admin: the change the last-admin rule must check first, in both twins alike."""
    if row.role != ADMIN_ROLE or row.disabled:
        return False
    return disabled or (role is not None and role != ADMIN_ROLE)


def last_admin(name: str, change: str) -> LastAdmin:
    return LastAdmin(
        f"{name} is the last enabled admin: {change} would leave nobody to administer the "
        "fleet; make another user admin first"
    )


class UserRepo:
    def __init__(self, now: Now) -> None:
        self._now = now

    # --- users --------------------------------------------------------------------------

    def create_user(
        self, name: str, *, role: str, grants: Sequence[str] = (), teams: Sequence[str] = ()
    ) -> UserRow:
        """A new user in ``teams`` (each must exist; the first is their default)."""
        team_ids = [self._team_id(team) for team in teams]
        now = self._now()
        values: dict[str, Any] = {
            "name": name,
            "role": role,
            "grants": list(grants),
            "created_at": now,
            "updated_at": now,
        }
        try:
            with database_proxy.atomic():
                stored = insert_row(User, values)
        except pw.IntegrityError:
            raise AlreadyExists(f"a user named {name} exists already") from None
        row = inserted(UserRow, User, stored)
        for i, team_id in enumerate(dict.fromkeys(team_ids)):
            TeamMember.insert(
                team=team_id, user=row.id, is_default=i == 0, created_at=now
            ).execute()
        return row

    def user(self, name: str) -> UserRow | None:
        return first_of(UserRow, User.select().where(User.name == name))

    def user_by_id(self, user_id: int) -> UserRow | None:
        return first_of(UserRow, User.select().where(User.id == user_id))

    def users(self) -> list[UserRow]:
        return rows_of(UserRow, User.select().order_by(User.id))

    def facts(self, user_id: int) -> UserFacts | None:
        """The user and their memberships, or None for an unknown id."""
        row = self.user_by_id(user_id)
        if row is None:
            return None
        return UserFacts(row, tuple(self.memberships(user=row.name)))

    def set_role(self, name: str, role: str, grants: Sequence[str] | None = None) -> UserRow:
        """Give ``name`` ``role`` (and ``grants``, when given; None keeps theirs)."""
        row = self._existing(name)
        if loses_an_admin(row, role=role):
            self._keep_an_admin(row, f"making them {role}")
        values: dict[str, Any] = {"role": role, "updated_at": self._now()}
        if grants is not None:
            values["grants"] = list(grants)
        User.update(values).where(User.id == row.id).execute()
        return self._existing(name)

    def set_disabled(self, name: str, disabled: bool) -> UserRow:
        row = self._existing(name)
        if loses_an_admin(row, disabled=disabled):
            self._keep_an_admin(row, "disabling them")
        User.update(disabled=disabled, updated_at=self._now()).where(User.id == row.id).execute()
        return self._existing(name)

    def set_password(self, name: str, password_hash: str | None) -> UserRow:
        """Store ``name``'s password hash (None: no password, so no password sign-in)."""
        row = self._existing(name)
        values = {"password_hash": password_hash, "updated_at": self._now()}
        User.update(values).where(User.id == row.id).execute()
        return self._existing(name)

    def _keep_an_admin(self, row: UserRow, change: str) -> None:
        others = User.select().where(
            User.role == ADMIN_ROLE,
            User.disabled == False,  # noqa: E712 (SQL, not a Python test)
            User.id != row.id,
        )
        if not others.exists():
            raise last_admin(row.name, change)

    def _existing(self, name: str) -> UserRow:
        row = self.user(name)
        if row is None:
            raise unknown_user(name)
        return row

    # --- teams --------------------------------------------------------------------------

    def create_team(self, name: str) -> TeamRow:
        try:
            with database_proxy.atomic():
                stored = insert_row(Team, {"name": name, "created_at": self._now()})
        except pw.IntegrityError:
            raise AlreadyExists(f"a team named {name} exists already") from None
        return inserted(TeamRow, Team, stored)

    def team(self, name: str) -> TeamRow | None:
        return first_of(TeamRow, Team.select().where(Team.name == name))

    def teams(self) -> list[TeamRow]:
        return rows_of(TeamRow, Team.select().order_by(Team.id))

    def memberships(self, *, user: str | None = None, team: str | None = None) -> list[Membership]:
        """Memberships of one user, of one team, or every one; in the order they began."""
        query: Any = (
            TeamMember.select(User.name, Team.name, TeamMember.is_default)
            .join(User, on=TeamMember.user == User.id)
            .switch(TeamMember)
            .join(Team, on=TeamMember.team == Team.id)
        )
        if user is not None:
            query = query.where(User.name == user)
        if team is not None:
            query = query.where(Team.name == team)
        rows = query.order_by(TeamMember.id).tuples()
        return [Membership(u, t, bool(d)) for u, t, d in rows]

    def add_member(self, team: str, user: str, *, default: bool = False) -> Membership:
        """Put ``user`` in ``team`` (a no-op if they are in it), as their default team
        when ``default`` or when it is their first."""
        team_id = self._team_id(team)
        user_id = self._existing(user).id
        mine = TeamMember.select().where(TeamMember.user == user_id)
        first = not mine.exists()
        if not mine.where(TeamMember.team == team_id).exists():
            TeamMember.insert(
                team=team_id, user=user_id, is_default=False, created_at=self._now()
            ).execute()
        if default or first:
            self._make_default(user_id, team_id)
        return next(m for m in self.memberships(user=user) if m.team == team)

    def remove_member(self, team: str, user: str) -> bool:
        """False when ``user`` was not in ``team``. Leaving the default team makes their
        oldest remaining one the default."""
        team_id = self._team_id(team)
        user_id = self._existing(user).id
        mine = TeamMember.select().where(TeamMember.user == user_id)
        gone = mine.where(TeamMember.team == team_id).first()
        if gone is None:
            return False
        TeamMember.delete().where(TeamMember.id == gone.id).execute()
        if gone.is_default:
            oldest = mine.order_by(TeamMember.id).first()
            if oldest is not None:
                self._make_default(user_id, oldest.team_id)
        return True

    def _make_default(self, user_id: int, team_id: int) -> None:
        TeamMember.update(is_default=TeamMember.team == team_id).where(
            TeamMember.user == user_id
        ).execute()

    def _team_id(self, name: str) -> int:
        row = self.team(name)
        if row is None:
            raise unknown_team(name)
        return row.id


class UserRecords:
    """Users and teams, awaited from the event loop (one DB read or write each).

    Every API request asks for its user's facts, and users change only through this
    facade, so the facts read once are kept until any user or team write."""

    def __init__(self, db: Connector, now: Now, repo: UserRepo | None = None) -> None:
        self.db = db
        self.repo = repo if repo is not None else UserRepo(now)
        self._facts: dict[int, UserFacts] = {}
        self._writes = 0

    async def facts(self, user_id: int) -> UserFacts | None:
        kept = self._facts.get(user_id)
        if kept is not None:
            return kept
        writes = self._writes
        found = await self.db.read(partial(self.repo.facts, user_id))
        # A write that overlapped this read may have come after it: keep nothing.
        if found is not None and writes == self._writes:
            self._facts[user_id] = found
        return found

    async def user(self, name: str) -> UserRow | None:
        return await self.db.read(partial(self.repo.user, name))

    async def users(self) -> list[UserRow]:
        return await self.db.read(self.repo.users)

    async def team(self, name: str) -> TeamRow | None:
        return await self.db.read(partial(self.repo.team, name))

    async def teams(self) -> list[TeamRow]:
        return await self.db.read(self.repo.teams)

    async def memberships(
        self, *, user: str | None = None, team: str | None = None
    ) -> list[Membership]:
        return await self.db.read(partial(self.repo.memberships, user=user, team=team))

    async def create_user(
        self, name: str, *, role: str, grants: Sequence[str] = (), teams: Sequence[str] = ()
    ) -> UserRow:
        create = partial(self.repo.create_user, name, role=role, grants=grants, teams=teams)
        return await self._write(create)

    async def set_role(self, name: str, role: str, grants: Sequence[str] | None = None) -> UserRow:
        return await self._write(partial(self.repo.set_role, name, role, grants))

    async def set_disabled(self, name: str, disabled: bool) -> UserRow:
        return await self._write(partial(self.repo.set_disabled, name, disabled))

    async def set_password(self, name: str, password_hash: str | None) -> UserRow:
        return await self._write(partial(self.repo.set_password, name, password_hash))

    async def create_team(self, name: str) -> TeamRow:
        return await self._write(partial(self.repo.create_team, name))

    async def add_member(self, team: str, user: str, *, default: bool = False) -> Membership:
        return await self._write(partial(self.repo.add_member, team, user, default=default))

    async def remove_member(self, team: str, user: str) -> bool:
        return await self._write(partial(self.repo.remove_member, team, user))

    async def _write(self, fn: Callable[[], T]) -> T:
        self._writes += 1
        try:
            return await self.db.write(fn)
        finally:
            self._writes += 1
            self._facts = {}
