"""Heartbeats are written in batches: one write per second for all workers, not one
write per heartbeat; a failed write keeps them for the next; shutdown writes the rest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator_testkit import settle

from tunefleet.actors.clock import FakeClock
from tunefleet.actors.persistence import HEARTBEAT_FLUSH_S, Persistence
from tunefleet.actors.records import WorkerRecord
from tunefleet.storage.database import open_database
from tunefleet.storage.store import Store


def _rec(worker_id: str, at: float) -> WorkerRecord:
    return WorkerRecord(
        worker_id=worker_id,
        name=worker_id,
        worker_type="persistent",
        state="idle",
        last_heartbeat_at=at,
        last_seen_at=at,
        gpu_utilization=[50.0],
    )


class CountingStore:
    """Store.save_heartbeats only: counts the writes, fails while told to."""

    def __init__(self) -> None:
        self.writes: list[list[str]] = []
        self.failing = False

    async def save_heartbeats(self, beats: list[Any]) -> int:
        if self.failing:
            raise OSError("disk gone")
        self.writes.append(sorted(b.worker_id for b in beats))
        return len(beats)


async def test_heartbeats_within_a_second_share_one_write_with_the_latest_values(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    db = await open_database(None, tmp_path)
    try:
        store = Store(db, now=clock.time)
        for worker_id in ("w_1", "w_2"):
            await store.create_worker(worker_id, name=worker_id, worker_type="persistent")
        persistence = Persistence(store)
        writes_before = db.stats.writes
        first, second = _rec("w_1", 100.0), _rec("w_2", 100.5)
        persistence.heartbeat_seen(first, clock)
        persistence.heartbeat_seen(second, clock)
        first.last_heartbeat_at = 100.9  # a later heartbeat of the same worker
        persistence.heartbeat_seen(first, clock)
        assert clock.pending_timers() == 1
        assert (await store.get_worker("w_1")).last_heartbeat_at is None  # type: ignore[union-attr]

        await clock.advance(HEARTBEAT_FLUSH_S)
        await settle()
        one, two = await store.get_worker("w_1"), await store.get_worker("w_2")
        assert one is not None and two is not None
        assert (one.last_heartbeat_at, two.last_heartbeat_at) == (100.9, 100.5)
        assert one.gpu_utilization == [50.0]
        assert db.stats.writes == writes_before + 1  # ONE write for three heartbeats
    finally:
        await db.close()


async def test_a_failed_write_keeps_the_heartbeats_for_the_next_flush() -> None:
    clock = FakeClock()
    store = CountingStore()
    persistence = Persistence(store)  # type: ignore[arg-type]
    store.failing = True
    persistence.heartbeat_seen(_rec("w_1", 1.0), clock)
    await clock.advance(HEARTBEAT_FLUSH_S)
    await settle()
    assert store.writes == []

    store.failing = False
    persistence.heartbeat_seen(_rec("w_2", 2.0), clock)
    await clock.advance(HEARTBEAT_FLUSH_S)
    await settle()
    assert store.writes == [["w_1", "w_2"]]


async def test_flush_writes_what_is_pending_at_once_and_cancels_the_timer() -> None:
    clock = FakeClock()
    store = CountingStore()
    persistence = Persistence(store)  # type: ignore[arg-type]
    persistence.heartbeat_seen(_rec("w_1", 1.0), clock)
    await persistence.flush_heartbeats()
    assert store.writes == [["w_1"]]
    assert clock.pending_timers() == 0
    await persistence.flush_heartbeats()  # nothing left: no write
    assert store.writes == [["w_1"]]
