"""Users, teams and memberships on SQLite and PostgreSQL: what migration 10 leaves, the
default team kept one per user, the last admin kept, and jobs found by owner and viewer."""

from __future__ import annotations

import pytest

from tunefleet.storage.errors import AlreadyExists, LastAdmin, Missing
from tunefleet.storage.store import Store
from tunefleet.storage.store_base import JobOwner, Viewer
from tunefleet.storage.store_users import Membership


async def test_a_new_database_has_the_first_admin_in_the_default_team(store: Store) -> None:
    users = await store.users.users()
    assert [(u.name, u.role, u.disabled) for u in users] == [("admin", "admin", False)]
    facts = await store.users.facts(users[0].id)
    assert facts is not None and facts.default_team == "default"
    assert [t.name for t in await store.users.teams()] == ["default"]


async def test_users_join_teams_and_keep_one_default(store: Store) -> None:
    users = store.users
    await users.create_team("ml")
    await users.create_team("vision")
    alice = await users.create_user("alice", role="researcher", teams=["ml", "vision"])
    assert (alice.role, alice.grants, alice.password_hash) == ("researcher", [], None)
    assert await users.memberships(user="alice") == [
        Membership("alice", "ml", True),
        Membership("alice", "vision", False),
    ]
    await users.add_member("vision", "alice", default=True)
    facts = await users.facts(alice.id)
    assert facts is not None and facts.default_team == "vision"
    # Leaving the default team makes the oldest remaining one the default.
    assert await users.remove_member("vision", "alice")
    assert not await users.remove_member("vision", "alice")
    assert await users.memberships(user="alice") == [Membership("alice", "ml", True)]
    assert await users.remove_member("ml", "alice")
    assert await users.memberships(user="alice") == []
    # The first team a user joins is their default.
    assert await users.add_member("vision", "alice") == Membership("alice", "vision", True)


async def test_unknown_names_and_duplicates_are_refused_and_change_nothing(store: Store) -> None:
    users = store.users
    await users.create_team("ml")
    with pytest.raises(Missing, match="unknown team: nope"):
        await users.create_user("bob", role="viewer", teams=["ml", "nope"])
    assert await users.user("bob") is None
    with pytest.raises(AlreadyExists, match="a team named ml exists already"):
        await users.create_team("ml")
    await users.create_user("bob", role="viewer")
    with pytest.raises(AlreadyExists, match="a user named bob exists already"):
        await users.create_user("bob", role="admin")
    with pytest.raises(Missing, match="unknown user: carol"):
        await users.add_member("ml", "carol")
    with pytest.raises(Missing, match="unknown user: carol"):
        await users.set_disabled("carol", True)
    with pytest.raises(Missing, match="unknown team: nope"):
        await users.remove_member("nope", "bob")


async def test_a_password_hash_is_stored_replaced_and_cleared(store: Store) -> None:
    users = store.users
    await users.create_user("alice", role="researcher")
    row = await users.set_password("alice", "$argon2id$first")
    assert row.password_hash == "$argon2id$first"
    assert (await users.set_password("alice", "$argon2id$second")).password_hash == (
        "$argon2id$second"
    )
    facts = await users.facts(row.id)
    assert facts is not None and facts.user.password_hash == "$argon2id$second"
    assert (await users.set_password("alice", None)).password_hash is None
    with pytest.raises(Missing, match="unknown user: carol"):
        await users.set_password("carol", "$argon2id$x")


async def test_the_last_enabled_admin_is_kept(store: Store) -> None:
    users = store.users
    with pytest.raises(LastAdmin, match="admin is the last enabled admin"):
        await users.set_disabled("admin", True)
    with pytest.raises(LastAdmin, match="making them viewer"):
        await users.set_role("admin", "viewer")
    await users.create_user("root2", role="admin")
    await users.set_disabled("root2", True)  # a disabled admin does not count
    with pytest.raises(LastAdmin):
        await users.set_disabled("admin", True)
    await users.set_disabled("root2", False)
    demoted = await users.set_role("admin", "lead", ["queue.command"])
    assert (demoted.role, demoted.grants) == ("lead", ["queue.command"])
    kept = await users.set_role("admin", "researcher")  # grants not given: kept
    assert kept.grants == ["queue.command"]
    with pytest.raises(LastAdmin, match="root2 is the last enabled admin"):
        await users.set_disabled("root2", True)


async def test_facts_are_read_again_after_any_user_write(store: Store) -> None:
    alice = await store.users.create_user("alice", role="researcher")
    before = await store.users.facts(alice.id)
    assert before is not None and not before.user.disabled
    await store.users.set_disabled("alice", True)
    after = await store.users.facts(alice.id)
    assert after is not None and after.user.disabled


async def test_tokens_name_their_user(store: Store) -> None:
    alice = await store.users.create_user("alice", role="researcher")
    row = await store.create_api_token(
        name="laptop", token_hash="h1", permissions=["queue.submit"], user_id=alice.id
    )
    assert row.user_id == alice.id
    found = await store.api_token_by_hash("h1")
    assert found is not None and found.user_id == alice.id


async def test_jobs_are_found_by_owner_and_by_who_may_see_them(store: Store) -> None:
    owners = [("alice", "ml"), ("bob", "ml"), ("carol", "vision"), ("alice", "vision")]
    for i, (user, team) in enumerate(owners):
        await store.create_job(f"j_{i}", config={}, user_name=user, team_name=team)

    async def ids(**filters: object) -> list[str]:
        return sorted(row.id for row in await store.list_jobs(**filters))  # type: ignore[arg-type]

    assert await ids(owner=JobOwner(user_name="alice")) == ["j_0", "j_3"]
    assert await ids(owner=JobOwner(team_name="ml")) == ["j_0", "j_1"]
    assert await ids(owner=JobOwner("alice", "vision")) == ["j_3"]
    assert await ids(visible_to=Viewer("bob", frozenset({"ml"}))) == ["j_0", "j_1"]
    assert await ids(visible_to=Viewer("carol", frozenset())) == ["j_2"]
    assert await ids(visible_to=Viewer("dave", frozenset())) == []
    viewer = Viewer("carol", frozenset({"vision"}))
    assert await store.count_jobs(visible_to=viewer) == 2
    assert await store.count_jobs(visible_to=viewer, owner=JobOwner(user_name="alice")) == 1
