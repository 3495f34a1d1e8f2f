"""An API token's row and its user's facts → the one principal every route asks.

Built once per token and kept while neither the token's row nor its user's facts change
(the store hands back the same objects until a write replaces them), so an API request
costs two dictionary lookups here, not a permission computation.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunefleet.http.auth import ApiPrincipal, UserDisabled
from tunefleet.http.roles import user_ceiling
from tunefleet.http.sessions import Session
from tunefleet.storage.rows import ApiTokenRow
from tunefleet.storage.store import Store
from tunefleet.storage.store_users import UserFacts


def principal_of_token(row: ApiTokenRow, facts: UserFacts) -> ApiPrincipal:
    """The token's permissions narrowed to its user's role and grants."""
    user = facts.user
    ceiling = user_ceiling(user.role, user.grants)
    return ApiPrincipal(
        token_id=str(row.id),
        name=row.name,
        permissions=frozenset(row.permissions) & ceiling,
        user=user.name,
        role=user.role,
        teams=frozenset(m.team for m in facts.teams),
        default_team=facts.default_team,
        user_id=user.id,
    )


SESSION_TOKEN_NAME = "web session"


def principal_of_session(session: Session, facts: UserFacts) -> ApiPrincipal:
    """A signed-in person holds everything their role and grants allow, as a token made
    with every permission would. ``token_id`` names the session by its hash's start (for
    the audit log and its streams), never by its id."""
    user = facts.user
    return ApiPrincipal(
        token_id=f"session-{session.id_hash[:12]}",
        name=SESSION_TOKEN_NAME,
        permissions=user_ceiling(user.role, user.grants),
        user=user.name,
        role=user.role,
        teams=frozenset(m.team for m in facts.teams),
        default_team=facts.default_team,
        user_id=user.id,
    )


async def resolve_session(store: Store, session: Session) -> ApiPrincipal | None:
    """The session's principal; None for a user who is gone, UserDisabled for one who
    is disabled."""
    facts = await store.users.facts(session.user_id)
    if facts is None:
        return None
    if facts.user.disabled:
        raise UserDisabled(facts.user.name)
    return principal_of_session(session, facts)


@dataclass(frozen=True, slots=True)
class _Built:
    row: ApiTokenRow
    facts: UserFacts
    principal: ApiPrincipal


class Principals:
    """Principals by token hash, rebuilt when the row or the facts behind one change."""

    def __init__(self) -> None:
        self._built: dict[str, _Built] = {}

    async def resolve(self, store: Store, token_hash: str, row: ApiTokenRow) -> ApiPrincipal | None:
        """None for a token that names no user (none should: migration 10 gave every
        token one); UserDisabled for a disabled user's."""
        if row.user_id is None:
            return None
        facts = await store.users.facts(row.user_id)
        if facts is None:
            return None
        if facts.user.disabled:
            raise UserDisabled(facts.user.name)
        built = self._built.get(token_hash)
        if built is not None and built.row is row and built.facts is facts:
            return built.principal
        principal = principal_of_token(row, facts)
        if len(self._built) > 10_000:  # tokens come and go: never an unbounded map
            self._built.clear()
        self._built[token_hash] = _Built(row, facts, principal)
        return principal
