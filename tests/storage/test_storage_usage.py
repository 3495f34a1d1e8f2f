"""Usage read from attempts and teams' budgets, on SQLite, PostgreSQL and in memory
(issue 24, item 6)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from storage_testkit import DbTarget

from tunefleet.storage.database import open_database
from tunefleet.storage.memory import memory_store
from tunefleet.storage.models import database_proxy
from tunefleet.storage.store import Store
from tunefleet.usage import AttemptSpan, attempt_gpu_ms, roll_up

T = 1_700_000_000.0


@pytest.fixture(params=["database", "memory"])
async def any_store(
    request: pytest.FixtureRequest, db_target: DbTarget, clock: list[float]
) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield memory_store(lambda: clock[0])
        return
    db = await open_database(db_target.url, db_target.data_dir)
    try:
        yield Store(db, now=lambda: clock[0])
    finally:
        await db.close()


async def _attempts(store: Store) -> None:
    await store.create_job("j_a", config={}, user_name="alice", team_name="ml", gpu_count=2)
    await store.create_job("j_b", config={}, user_name="bob", team_name="vision", gpu_count=1)
    await store.start_attempt("j_a", 1, worker_id="w1", dispatched_at=T)
    await store.end_attempt("j_a", 1, outcome="failed", ended_at=T + 100)
    await store.start_attempt("j_a", 2, worker_id="w1", dispatched_at=T + 200)
    await store.start_attempt("j_b", 1, worker_id="w2", dispatched_at=T + 50)
    await store.end_attempt("j_b", 1, outcome="succeeded", ended_at=T + 80)


async def test_attempt_spans_carry_their_jobs_owner_and_gpus(any_store: Store) -> None:
    await _attempts(any_store)
    spans = await any_store.usage.attempt_spans(None, None)
    assert spans == [
        AttemptSpan("j_a", 1, "alice", "ml", 2, T, T + 100),
        AttemptSpan("j_b", 1, "bob", "vision", 1, T + 50, T + 80),
        AttemptSpan("j_a", 2, "alice", "ml", 2, T + 200, None),
    ]
    now = T + 300
    rows = roll_up(spans, "team", now)
    assert {r.key: r.gpu_seconds for r in rows} == {"ml": 2 * 100 + 2 * 100, "vision": 30}
    assert sum(r.gpu_ms for r in rows) == sum(attempt_gpu_ms(s, now) for s in spans)


async def test_only_attempts_that_overlap_the_window_are_read(any_store: Store) -> None:
    await _attempts(any_store)

    async def keys(since: float | None, until: float | None) -> list[tuple[str, int]]:
        return [(s.job_id, s.attempt) for s in await any_store.usage.attempt_spans(since, until)]

    assert await keys(T + 100, None) == [("j_a", 2)]  # ended at since: none of it after
    assert await keys(T + 90, T + 200) == [("j_a", 1)]
    assert await keys(None, T + 50) == [("j_a", 1)]
    assert await keys(T + 10_000, None) == [("j_a", 2)]  # still running


async def test_a_budget_is_set_replaced_and_cleared(any_store: Store, clock: list[float]) -> None:
    assert await any_store.usage.budget("ml") is None
    first = await any_store.usage.set_budget("ml", 10.0, "day", "warn")
    assert (first.team_name, first.gpu_hours, first.period, first.action) == (
        "ml",
        10.0,
        "day",
        "warn",
    )
    clock[0] += 5
    second = await any_store.usage.set_budget("ml", 2.5, "month", "block")
    assert (second.id, second.gpu_hours, second.period, second.action) == (
        first.id,
        2.5,
        "month",
        "block",
    )
    assert second.updated_at == first.updated_at + 5
    await any_store.usage.set_budget("vision", 1.0, "week", "warn")
    assert [b.team_name for b in await any_store.usage.budgets()] == ["ml", "vision"]
    assert await any_store.usage.clear_budget("ml") is True
    assert await any_store.usage.clear_budget("ml") is False
    assert await any_store.usage.budget("ml") is None


async def test_a_budget_outlives_a_restart(db_target: DbTarget, tmp_path: Path) -> None:
    db = await open_database(db_target.url, db_target.data_dir)
    await Store(db).usage.set_budget("ml", 3.0, "week", "block")
    await db.close()
    db = await open_database(db_target.url, db_target.data_dir)
    try:
        row = await Store(db).usage.budget("ml")
    finally:
        await db.close()
    assert row is not None and (row.gpu_hours, row.period, row.action) == (3.0, "week", "block")


async def test_attempts_are_found_by_their_end(db_target: DbTarget) -> None:
    """Migration 12's index: usage and budget checks read attempts ended after a time."""
    db = await open_database(db_target.url, db_target.data_dir)
    try:
        indexes = await db.read(lambda: database_proxy.get_indexes("job_attempt"))
    finally:
        await db.close()
    assert ["ended_at"] in [list(index.columns) for index in indexes]


async def test_a_budget_is_read_once_for_many_submits_and_again_after_a_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every submit asks its team's budget: kept in memory, not a database read each."""
    store = memory_store(lambda: T)
    reads: list[int] = []
    real = store.usage.repo.budgets
    monkeypatch.setattr(store.usage.repo, "budgets", lambda: reads.append(1) or real())
    assert await store.usage.budget("ml") is None
    for _ in range(5):
        assert await store.usage.budget("ml") is None
    assert len(reads) == 1
    await store.usage.set_budget("ml", 10.0, "day", "block")
    assert (await store.usage.budget("ml")).gpu_hours == 10.0  # type: ignore[union-attr]
    await store.usage.clear_budget("ml")
    assert await store.usage.budget("ml") is None
    assert len(reads) == 3
