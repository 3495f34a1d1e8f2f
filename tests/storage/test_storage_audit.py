"""The audit hash chain: appends link up, verify finds the first tampered event."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tunefleet.audit import AuditKind
from tunefleet.fsm.job import JobState
from tunefleet.storage.models import AuditEvent
from tunefleet.storage.store import Store
from tunefleet.storage.store_audit import GENESIS_HASH, event_hash


async def _chain(store: Store, count: int) -> list[int]:
    ids = []
    for i in range(count):
        row = await store.append_audit(
            "job.submit" if i % 2 else "worker.register",
            actor=f"user{i % 3}",
            client_address="127.0.0.1",
            target=f"j_{i}",
            detail={"i": i, "note": "ünïcode ✓", "nested": {"b": [1, 2.5], "a": None}},
            at=1_000.0 + i,
        )
        ids.append(row.id)
    return ids


async def test_events_link_to_their_predecessor(store: Store) -> None:
    first = await store.append_audit("worker.register", actor="w_1", detail={"name": "box"})
    second = await store.append_audit("token.rotate", actor="admin", outcome="denied")
    assert first.prev_hash == GENESIS_HASH
    assert second.prev_hash == first.hash
    fields = {
        "at": second.at,
        "kind": "token.rotate",
        "actor": "admin",
        "client_address": None,
        "target": None,
        "outcome": "denied",
        "detail": {},
    }
    assert second.hash == event_hash(first.hash, fields)


async def test_an_empty_or_intact_chain_verifies(store: Store) -> None:
    assert await store.verify_audit() == (True, None)
    await _chain(store, 7)
    assert await store.verify_audit() == (True, None)
    assert await store.verify_audit(batch_size=2) == (True, None)  # crossing batch edges
    assert await store.verify_audit(batch_size=7) == (True, None)
    with pytest.raises(ValueError, match="batch_size"):
        await store.verify_audit(batch_size=0)


async def test_integer_times_and_odd_detail_still_verify(store: Store) -> None:
    # 5 comes back from the database as 5.0 and {1: ...} as {"1": ...}: the hash must
    # cover what is stored, not what was passed in.
    await store.append_audit("x", at=5, detail={1: (1, 2)})  # type: ignore[dict-item]
    rows = await store.list_audit()
    assert (rows[0].at, rows[0].detail) == (5.0, {"1": [1, 2]})
    assert await store.verify_audit() == (True, None)


@pytest.mark.parametrize(
    ("change", "column"),
    [
        ({"detail": {"i": 99}}, "detail"),
        ({"actor": "mallory"}, "actor"),
        ({"at": 1.0}, "at"),
        ({"hash": "f" * 64}, "hash"),
    ],
)
async def test_editing_an_event_is_found(
    store: Store, change: dict[str, object], column: str
) -> None:
    ids = await _chain(store, 6)
    query = AuditEvent.update(**change).where(AuditEvent.id == ids[3])
    await store.db.write(query.execute)
    assert await store.verify_audit() == (False, ids[3]), column
    assert await store.verify_audit(batch_size=2) == (False, ids[3])


async def test_deleting_an_event_breaks_the_next_link(store: Store) -> None:
    ids = await _chain(store, 5)
    await store.db.write(AuditEvent.delete().where(AuditEvent.id == ids[2]).execute)
    assert await store.verify_audit() == (False, ids[3])


async def test_recomputing_one_hash_does_not_hide_an_edit(store: Store) -> None:
    ids = await _chain(store, 4)

    def forge() -> None:
        row = AuditEvent.get_by_id(ids[1])
        fields = {
            "at": row.at, "kind": row.kind, "actor": "mallory",
            "client_address": row.client_address, "target": row.target,
            "outcome": row.outcome, "detail": row.detail,
        }  # fmt: skip
        AuditEvent.update(actor="mallory", hash=event_hash(row.prev_hash, fields)).where(
            AuditEvent.id == ids[1]
        ).execute()

    await store.db.write(forge)
    assert await store.verify_audit() == (False, ids[2])  # the next link no longer matches


async def test_concurrent_appends_form_one_chain(store: Store) -> None:
    await asyncio.gather(*(store.append_audit("burst", detail={"n": n}) for n in range(60)))
    rows = await store.list_audit(newest_first=False, limit=100)
    assert len(rows) == 60
    assert all(later.prev_hash == earlier.hash for earlier, later in itertools.pairwise(rows))
    assert await store.verify_audit() == (True, None)


async def test_list_filters_by_kind_actor_target_outcome_and_time(store: Store) -> None:
    ids = await _chain(store, 6)  # at = 1000..1005, actors user0 user1 user2 user0 ...

    async def found(**filters: object) -> list[int]:
        return [row.id for row in await store.list_audit(**filters)]  # type: ignore[arg-type]

    assert await found() == ids[::-1]
    assert await found(newest_first=False, limit=2) == ids[:2]
    assert await found(newest_first=False, limit=2, offset=2) == ids[2:4]
    assert await found(kind="job.submit") == [ids[5], ids[3], ids[1]]
    assert await found(actor="user0") == [ids[3], ids[0]]
    assert await found(target="j_4") == [ids[4]]
    assert await found(since=1002.0, until=1004.0) == [ids[3], ids[2]]
    assert await found(kind="worker.register", since=1001.0) == [ids[4], ids[2]]
    assert await found(outcome="denied") == []
    row = (await store.list_audit(limit=1))[0]
    assert row.detail == {"i": 5, "note": "ünïcode ✓", "nested": {"b": [1, 2.5], "a": None}}


@pytest.mark.parametrize(
    "detail",
    [
        {},
        {"reason": None, "attempt": 2, "ok": True, "share": 0.5, "note": "ünïcode ✓"},
        {"nested": {"b": [1, 2.5], "a": None}, "tuple": (1, 2)},
        {1: "an int key", 2: None},
        {"state": JobState.RUNNING},
        {"big": 10**20, "tiny": -0.0, "exp": 1e16},
    ],
)
async def test_an_appended_event_is_returned_as_a_read_gives_it_back(
    store: Store, detail: dict[object, object]
) -> None:
    appended = await store.append_audit(
        AuditKind.JOB_STATUS, actor="w_1", target=JobState.RUNNING, detail=detail, at=7
    )  # type: ignore[arg-type]
    [read] = await store.list_audit()
    assert appended == read
    assert [(k, type(v)) for k, v in appended.detail.items()] == [
        (k, type(v)) for k, v in read.detail.items()
    ]
    assert await store.verify_audit() == (True, None)
