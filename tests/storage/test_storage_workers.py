"""Workers, worker tokens and API tokens in the store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tunefleet.storage.errors import AlreadyExists
from tunefleet.storage.store import Store


async def _worker(store: Store, worker_id: str = "w_1", **fields: Any) -> None:
    await store.create_worker(
        worker_id, name=f"box-{worker_id}", worker_type="persistent", **fields
    )


async def test_create_and_get_a_worker_with_every_kind_of_field(
    store: Store, clock: list[float]
) -> None:
    created = await store.create_worker(
        "w_1",
        name="gpu-box",
        worker_type="ephemeral",
        labels={"gpu": "a100", "zone": "eu"},
        gpu_info={"devices": [{"index": 0, "name": "A100", "vram_gb": 80.0}], "driver": "550"},
        gpu_count=1,
        gpu_vram_gb=79.6,
        persistent_agent=False,
        gpu_utilization=[12.5],
        last_heartbeat_at=1_700_000_000.123456,
    )
    assert created == await store.get_worker("w_1")
    assert created.state == "connecting"
    assert created.gpu_info["devices"][0]["name"] == "A100"
    assert (created.gpu_vram_gb, created.persistent_agent) == (79.6, False)
    assert created.last_heartbeat_at == 1_700_000_000.123456  # double precision kept
    assert created.created_at == created.updated_at == clock[0]
    assert created.labels == {"gpu": "a100", "zone": "eu"}
    assert created.agent_labels == {} and created.vram_used_gb == []
    assert await store.get_worker("w_nope") is None


async def test_duplicate_worker_id_is_refused(store: Store) -> None:
    await _worker(store)
    with pytest.raises(AlreadyExists, match="worker w_1 already exists"):
        await _worker(store)


async def test_unknown_or_protected_fields_are_programming_errors(store: Store) -> None:
    with pytest.raises(TypeError, match="has no field"):
        await _worker(store, "w_2", colour="blue")
    await _worker(store)
    with pytest.raises(TypeError, match="cannot be set here"):
        await store.update_worker("w_1", state="idle")
    with pytest.raises(TypeError, match="has no field"):
        await store.cas_worker_state("w_1", "connecting", "idle", colour="blue")


async def test_update_sets_fields_and_updated_at(store: Store, clock: list[float]) -> None:
    await _worker(store)
    clock[0] += 5
    assert await store.update_worker("w_1", last_event_id=42, vram_used_gb=[1.5, 2.0])
    row = await store.get_worker("w_1")
    assert row is not None
    assert (row.last_event_id, row.vram_used_gb, row.updated_at) == (42, [1.5, 2.0], clock[0])
    assert not await store.update_worker("w_missing", last_event_id=1)


async def test_cas_state_only_from_the_expected_state(store: Store) -> None:
    await _worker(store)
    assert await store.cas_worker_state("w_1", "connecting", "idle", hostname="h1")
    assert not await store.cas_worker_state("w_1", "connecting", "busy")
    assert await store.cas_worker_state("w_1", ["busy", "idle"], "busy", current_job_id="j_1")
    row = await store.get_worker("w_1")
    assert row is not None
    assert (row.state, row.hostname, row.current_job_id) == ("busy", "h1", "j_1")
    assert not await store.cas_worker_state("w_missing", "idle", "busy")
    with pytest.raises(ValueError, match="at least one state"):
        await store.cas_worker_state("w_1", [], "idle")


async def test_list_workers_by_status_type_and_locality(store: Store, clock: list[float]) -> None:
    for worker_id in ("w_a", "w_b", "w_c"):
        clock[0] += 1
        await _worker(store, worker_id)
    await store.create_worker("w_local", name="local", worker_type="persistent", is_local=True)
    await store.cas_worker_state("w_b", "connecting", "idle")
    assert [w.id for w in await store.list_workers()] == ["w_a", "w_b", "w_c", "w_local"]
    assert [w.id for w in await store.list_workers("idle")] == ["w_b"]
    assert [w.id for w in await store.list_workers(["idle", "offline"])] == ["w_b"]
    assert [w.id for w in await store.list_workers(is_local=True)] == ["w_local"]
    assert await store.list_workers(worker_type="ephemeral") == []


async def test_tokens_rotate_and_delete_cascades(store: Store) -> None:
    await _worker(store, token_hash="a" * 64)
    assert (await store.worker_by_token_hash("a" * 64)) is not None
    assert await store.set_worker_token("w_1", "b" * 64)
    assert await store.worker_by_token_hash("a" * 64) is None  # rotated out at once
    found = await store.worker_by_token_hash("b" * 64)
    assert found is not None and found.id == "w_1"
    assert [t.token_hash for t in await store.list_worker_tokens("w_1")] == ["b" * 64]
    every = await store.list_worker_tokens("w_1", include_revoked=True)
    assert [t.revoked_at is None for t in every] == [False, True]
    assert not await store.set_worker_token("w_missing", "c" * 64)
    assert await store.delete_worker("w_1")
    assert not await store.delete_worker("w_1")
    assert await store.worker_by_token_hash("b" * 64) is None
    assert await store.list_worker_tokens(include_revoked=True) == []


async def test_a_token_hash_cannot_belong_to_two_workers(store: Store) -> None:
    await _worker(store, "w_1", token_hash="a" * 64)
    await _worker(store, "w_2")
    with pytest.raises(AlreadyExists, match="worker token hash is already in use"):
        await store.set_worker_token("w_2", "a" * 64)
    # The failed rotation revoked nothing: its savepoint was rolled back.
    assert (await store.worker_by_token_hash("a" * 64)) is not None


async def test_concurrent_worker_cas_has_one_winner(store: Store) -> None:
    await _worker(store)
    results = await asyncio.gather(
        *(store.cas_worker_state("w_1", "connecting", "idle", hostname=f"h{i}") for i in range(40))
    )
    assert results.count(True) == 1
    row = await store.get_worker("w_1")
    assert row is not None and row.hostname == f"h{results.index(True)}"


async def test_api_tokens_lifecycle(store: Store, clock: list[float]) -> None:
    token = await store.create_api_token(
        name="ci", token_hash="t" * 64, permissions=["jobs.submit", "admin.workers"]
    )
    assert (token.name, token.permissions, token.created_at) == (
        "ci",
        ["jobs.submit", "admin.workers"],
        clock[0],
    )
    assert token.last_used_at is None
    assert await store.api_token_by_hash("t" * 64) == token
    clock[0] += 3
    assert await store.touch_api_token(token.id)
    touched = await store.api_token_by_hash("t" * 64)
    assert touched is not None and touched.last_used_at == clock[0]
    other = await store.create_api_token(name="cli", token_hash="u" * 64, permissions=[])
    assert [t.id for t in await store.list_api_tokens()] == [token.id, other.id]
    assert await store.revoke_api_token(token.id)
    assert not await store.revoke_api_token(token.id)  # already revoked
    assert not await store.touch_api_token(token.id)
    assert await store.api_token_by_hash("t" * 64) is None
    assert [t.id for t in await store.list_api_tokens()] == [other.id]
    assert len(await store.list_api_tokens(include_revoked=True)) == 2
    with pytest.raises(AlreadyExists, match="API token hash"):
        await store.create_api_token(name="again", token_hash="u" * 64, permissions=[])


async def test_a_live_api_token_is_read_once_then_served_from_memory(store: Store) -> None:
    token = await store.create_api_token(name="ci", token_hash="t" * 64, permissions=[])
    assert await store.api_token_by_hash("t" * 64) == token
    reads = store.db.stats.reads
    for _ in range(5):
        assert await store.api_token_by_hash("t" * 64) == token
    assert store.db.stats.reads == reads
    assert await store.api_token_by_hash("x" * 64) is None  # unknown: always asked
    assert await store.api_token_by_hash("x" * 64) is None
    assert store.db.stats.reads == reads + 2


async def test_a_revocation_overlapping_a_lookup_leaves_no_live_copy(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = await store.create_api_token(name="ci", token_hash="t" * 64, permissions=[])
    real_read, answer = store.db.read, asyncio.Event()

    async def read_then_wait(fn: Any) -> Any:
        row = await real_read(fn)  # the token, still alive
        await answer.wait()  # ...handed back only after the revocation is done
        return row

    monkeypatch.setattr(store.db, "read", read_then_wait)
    lookup = asyncio.ensure_future(store.api_token_by_hash("t" * 64))
    for _ in range(500):
        if store.db.stats.reads:
            break
        await asyncio.sleep(0.01)
    assert await store.revoke_api_token(token.id)
    answer.set()
    assert await lookup == token  # it read before the revocation...
    monkeypatch.setattr(store.db, "read", real_read)
    assert await store.api_token_by_hash("t" * 64) is None  # ...and is not kept
