"""In-memory users, teams and memberships (store_users) and usage and budgets
(store_usage): their repositories over memory_tables, keeping their contract (same
arguments, answers and errors; the contract test checks)."""

from __future__ import annotations

from collections.abc import Sequence

from tunefleet.storage.errors import AlreadyExists
from tunefleet.storage.memory_tables import Tables, changed_row, fresh
from tunefleet.storage.models import Team, TeamBudget, TeamMember, User
from tunefleet.storage.rows import TeamBudgetRow, TeamMemberRow, TeamRow, UserRow
from tunefleet.storage.store_base import Now
from tunefleet.storage.store_usage import UsageRepo
from tunefleet.storage.store_users import (
    ADMIN_ROLE,
    Membership,
    UserFacts,
    UserRepo,
    last_admin,
    loses_an_admin,
    unknown_team,
    unknown_user,
)
from tunefleet.usage import AttemptSpan


class MemoryUserRepo(UserRepo):
    def __init__(self, now: Now, tables: Tables) -> None:
        self._now = now
        self._t = tables

    # --- users --------------------------------------------------------------------------

    def create_user(
        self, name: str, *, role: str, grants: Sequence[str] = (), teams: Sequence[str] = ()
    ) -> UserRow:
        team_ids = [self._team_row(team).id for team in teams]
        if any(u.name == name for u in self._t.users.values()):
            raise AlreadyExists(f"a user named {name} exists already")
        now = self._now()
        values = {
            "name": name,
            "role": role,
            "grants": list(grants),
            "created_at": now,
            "updated_at": now,
        }
        row = self._t.insert("users", UserRow, User, values)
        for i, team_id in enumerate(dict.fromkeys(team_ids)):
            self._insert_member(team_id, row.id, i == 0)
        return fresh(row)

    def user(self, name: str) -> UserRow | None:
        row = next((u for u in self._t.users.values() if u.name == name), None)
        return fresh(row) if row is not None else None

    def user_by_id(self, user_id: int) -> UserRow | None:
        row = self._t.users.get(user_id)
        return fresh(row) if row is not None else None

    def users(self) -> list[UserRow]:
        return [fresh(u) for u in self._t.users.values()]

    def facts(self, user_id: int) -> UserFacts | None:
        row = self.user_by_id(user_id)
        if row is None:
            return None
        return UserFacts(row, tuple(self.memberships(user=row.name)))

    def set_role(self, name: str, role: str, grants: Sequence[str] | None = None) -> UserRow:
        row = self._user_row(name)
        if loses_an_admin(row, role=role):
            self._check_other_admin(row, f"making them {role}")
        changes: dict[str, object] = {"role": role, "updated_at": self._now()}
        if grants is not None:
            changes["grants"] = list(grants)
        self._t.users[row.id] = changed_row(row, User, changes)
        return fresh(self._t.users[row.id])

    def set_disabled(self, name: str, disabled: bool) -> UserRow:
        row = self._user_row(name)
        if loses_an_admin(row, disabled=disabled):
            self._check_other_admin(row, "disabling them")
        changes = {"disabled": disabled, "updated_at": self._now()}
        self._t.users[row.id] = changed_row(row, User, changes)
        return fresh(self._t.users[row.id])

    def set_password(self, name: str, password_hash: str | None) -> UserRow:
        row = self._user_row(name)
        changes = {"password_hash": password_hash, "updated_at": self._now()}
        self._t.users[row.id] = changed_row(row, User, changes)
        return fresh(self._t.users[row.id])

    def _check_other_admin(self, row: UserRow, change: str) -> None:
        if not any(
            u.role == ADMIN_ROLE and not u.disabled and u.id != row.id
            for u in self._t.users.values()
        ):
            raise last_admin(row.name, change)

    def _user_row(self, name: str) -> UserRow:
        row = next((u for u in self._t.users.values() if u.name == name), None)
        if row is None:
            raise unknown_user(name)
        return row

    # --- teams --------------------------------------------------------------------------

    def create_team(self, name: str) -> TeamRow:
        if any(t.name == name for t in self._t.teams.values()):
            raise AlreadyExists(f"a team named {name} exists already")
        return fresh(
            self._t.insert("teams", TeamRow, Team, {"name": name, "created_at": self._now()})
        )

    def team(self, name: str) -> TeamRow | None:
        row = next((t for t in self._t.teams.values() if t.name == name), None)
        return fresh(row) if row is not None else None

    def teams(self) -> list[TeamRow]:
        return [fresh(t) for t in self._t.teams.values()]

    def memberships(self, *, user: str | None = None, team: str | None = None) -> list[Membership]:
        found = []
        for m in self._t.team_members.values():
            user_name = self._t.users[m.user_id].name
            team_name = self._t.teams[m.team_id].name
            if (user is None or user_name == user) and (team is None or team_name == team):
                found.append(Membership(user_name, team_name, m.is_default))
        return found

    def add_member(self, team: str, user: str, *, default: bool = False) -> Membership:
        team_id = self._team_row(team).id
        user_id = self._user_row(user).id
        mine = [m for m in self._t.team_members.values() if m.user_id == user_id]
        if not any(m.team_id == team_id for m in mine):
            self._insert_member(team_id, user_id, False)
        if default or not mine:
            self._set_default(user_id, team_id)
        return next(m for m in self.memberships(user=user) if m.team == team)

    def remove_member(self, team: str, user: str) -> bool:
        team_id = self._team_row(team).id
        user_id = self._user_row(user).id
        members = self._t.team_members
        gone = next(
            (m for m in members.values() if m.user_id == user_id and m.team_id == team_id), None
        )
        if gone is None:
            return False
        del members[gone.id]
        if gone.is_default:
            oldest = next((m for m in members.values() if m.user_id == user_id), None)
            if oldest is not None:
                self._set_default(user_id, oldest.team_id)
        return True

    def _insert_member(self, team_id: int, user_id: int, is_default: bool) -> None:
        values = {
            "team": team_id,
            "user": user_id,
            "is_default": is_default,
            "created_at": self._now(),
        }
        self._t.insert("team_members", TeamMemberRow, TeamMember, values)

    def _set_default(self, user_id: int, team_id: int) -> None:
        members = self._t.team_members
        for member_id, m in list(members.items()):
            if m.user_id == user_id:
                changes = {"is_default": m.team_id == team_id}
                members[member_id] = changed_row(m, TeamMember, changes)

    def _team_row(self, name: str) -> TeamRow:
        row = next((t for t in self._t.teams.values() if t.name == name), None)
        if row is None:
            raise unknown_team(name)
        return row


class MemoryUsageRepo(UsageRepo):
    """store_usage over the in-memory tables."""

    def __init__(self, now: Now, tables: Tables) -> None:
        super().__init__(now)
        self._t = tables

    def attempt_spans(self, since: float | None, until: float | None) -> list[AttemptSpan]:
        spans = []
        attempts = sorted(self._t.attempts.values(), key=lambda a: (a.dispatched_at, a.id))
        for a in attempts:
            if until is not None and not a.dispatched_at < until:
                continue
            if since is not None and a.ended_at is not None and not a.ended_at > since:
                continue
            job = self._t.jobs[a.job_id]
            spans.append(
                AttemptSpan(
                    a.job_id,
                    a.number,
                    job.user_name,
                    job.team_name,
                    job.gpu_count,
                    a.dispatched_at,
                    a.ended_at,
                )
            )
        return spans

    def set_budget(self, team: str, gpu_hours: float, period: str, action: str) -> TeamBudgetRow:
        values = {
            "team_name": team,
            "gpu_hours": gpu_hours,
            "period": period,
            "action": action,
            "updated_at": self._now(),
        }
        old = self._find_budget(team)
        if old is None:
            return fresh(self._t.insert("team_budgets", TeamBudgetRow, TeamBudget, values))
        row = self._t.team_budgets[old.id] = changed_row(old, TeamBudget, values)
        return fresh(row)

    def clear_budget(self, team: str) -> bool:
        old = self._find_budget(team)
        if old is not None:
            del self._t.team_budgets[old.id]
        return old is not None

    def budget(self, team: str) -> TeamBudgetRow | None:
        row = self._find_budget(team)
        return fresh(row) if row is not None else None

    def budgets(self) -> list[TeamBudgetRow]:
        return sorted((fresh(b) for b in self._t.team_budgets.values()), key=lambda b: b.team_name)

    def _find_budget(self, team: str) -> TeamBudgetRow | None:
        return next((b for b in self._t.team_budgets.values() if b.team_name == team), None)
