"""Heartbeat columns of many workers saved in one write (Store.save_heartbeats)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tunefleet.storage.store import Store


@dataclass
class Beat:
    worker_id: str
    last_heartbeat_at: float | None
    last_seen_at: float | None
    gpu_utilization: list[float] = field(default_factory=list)
    vram_used_gb: list[float] = field(default_factory=list)


async def test_saves_each_workers_heartbeat_columns_and_skips_unknown_workers(
    store: Store, clock: list[float]
) -> None:
    for worker_id in ("w_1", "w_2", "w_3"):
        await store.create_worker(worker_id, name=worker_id, worker_type="persistent")
    clock[0] += 10
    saved = await store.save_heartbeats(
        [
            Beat("w_1", 1_700_000_005.25, 1_700_000_005.5, [97.5, 12.0], [70.1]),
            Beat("w_3", 1_700_000_006.0, None),
            Beat("w_gone", 1.0, 1.0),
        ]
    )
    assert saved == 2
    one, two, three = [await store.get_worker(w) for w in ("w_1", "w_2", "w_3")]
    assert one is not None and two is not None and three is not None
    assert (one.last_heartbeat_at, one.last_seen_at) == (1_700_000_005.25, 1_700_000_005.5)
    assert (one.gpu_utilization, one.vram_used_gb) == ([97.5, 12.0], [70.1])
    assert one.updated_at == clock[0]
    assert two.last_heartbeat_at is None and two.updated_at == clock[0] - 10  # untouched
    assert (three.last_heartbeat_at, three.last_seen_at) == (1_700_000_006.0, None)
    assert one.state == "connecting"  # nothing but the heartbeat columns changes


async def test_nothing_to_save_is_no_write(store: Store) -> None:
    assert await store.save_heartbeats([]) == 0
