"""Metric history: what a report stores, replacing a step, the read cursor, the bound."""

from __future__ import annotations

import itertools
import math

import pytest

from tunefleet.storage import store_metrics
from tunefleet.storage.models import Job
from tunefleet.storage.store import Repos, Store
from tunefleet.storage.store_metrics import MAX_METRICS_PER_POINT, metric_point


def test_a_point_is_the_step_and_the_finite_numbers() -> None:
    report = {
        "step": 12,
        "total": 100,
        "percent": 12.0,
        "loss": 0.41,
        "lr": 1e-4,
        "epoch": 1,
        "phase": "warmup",
        "nan": math.nan,
        "inf": math.inf,
        "flag": True,
        "nested": {"a": 1},
        "x" * 65: 1.0,
    }
    assert metric_point(report) == (12, {"loss": 0.41, "lr": 1e-4, "epoch": 1.0})


@pytest.mark.parametrize("key", ["step", "global_step", "current_step"])
def test_the_step_may_be_spelled_as_common_trainers_do(key: str) -> None:
    assert metric_point({key: 7.0, "loss": 1}) == (7, {"loss": 1.0})


@pytest.mark.parametrize(
    "report",
    [
        None,
        {},
        {"loss": 0.4},  # no step: nowhere on the step axis
        {"step": "12", "loss": 0.4},
        {"step": -1, "loss": 0.4},
        {"step": math.nan, "loss": 0.4},
        {"step": True, "loss": 0.4},
        {"step": 2**60, "loss": 0.4},
        {"step": 10**400, "loss": 0.4},  # JSON integers are unbounded
        {"step": 1, "loss": 10**400},
        {"step": 3, "total": 10, "percent": 30},  # position only, no metric
    ],
)
def test_reports_without_a_step_or_a_number_are_no_point(report: dict[str, object]) -> None:
    assert metric_point(report) is None


def test_a_point_keeps_at_most_the_bounded_number_of_metrics() -> None:
    report = {"step": 1, **{f"m{i:03}": float(i) for i in range(100)}}
    point = metric_point(report)
    assert point is not None
    assert len(point[1]) == MAX_METRICS_PER_POINT


async def _job(store: Store, job_id: str = "j_1") -> None:
    await store.create_job(job_id, config={})


async def test_points_are_read_in_storing_order_after_a_cursor(store: Store) -> None:
    await _job(store)
    for step in range(5):
        assert await store.append_metrics("j_1", 1, step, {"loss": 1.0 / (step + 1)}, 10.0 + step)
    await store.append_metrics("j_1", 2, 3, {"loss": 0.2}, 20.0)
    rows = await store.read_metrics("j_1")
    assert [(r.attempt, r.step) for r in rows] == [(1, 0), (1, 1), (1, 2), (1, 3), (1, 4), (2, 3)]
    assert rows[0].values == {"loss": 1.0} and rows[0].at == 10.0
    after = await store.read_metrics("j_1", since=rows[2].id, limit=2)
    assert [r.step for r in after] == [3, 4]
    assert [r.step for r in await store.read_metrics("j_1", attempt=2)] == [3]
    assert await store.read_metrics("j_other") == []


async def test_a_step_reported_again_is_replaced_with_a_new_seq(store: Store) -> None:
    await _job(store)
    await store.append_metrics("j_1", 1, 5, {"loss": 0.5}, 1.0)
    [first] = await store.read_metrics("j_1")
    # A heartbeat repeating the last report changes nothing.
    assert not await store.append_metrics("j_1", 1, 5, {"loss": 0.5}, 2.0)
    assert await store.read_metrics("j_1") == [first]
    # New numbers for the step replace it, after the cursor a follower holds.
    assert await store.append_metrics("j_1", 1, 5, {"loss": 0.5, "lr": 0.1}, 3.0)
    [second] = await store.read_metrics("j_1")
    assert second.id > first.id
    assert (second.values, second.at) == ({"loss": 0.5, "lr": 0.1}, 3.0)
    assert await store.read_metrics("j_1", since=first.id) == [second]


async def test_a_long_run_stays_bounded_and_even_from_its_first_step(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = 100
    monkeypatch.setattr(store_metrics, "MAX_POINTS_PER_ATTEMPT", bound)
    await _job(store)
    steps = 10_000

    def run(repos: Repos) -> int:
        most = 0
        for step in range(steps):
            repos.metrics.append("j_1", 1, step, {"loss": 1.0 / (step + 1)}, float(step))
            most = max(most, repos.metrics.count("j_1", 1))
        return most

    assert await store.atomically(run) <= bound
    rows = await store.read_metrics("j_1")
    stored = sorted(r.step for r in rows)
    assert len(stored) <= bound
    assert stored[0] == 0 and stored[-1] == steps - 1  # from step 0 to the newest
    # Even: no gap wider than two of the widest intervals thinning could choose.
    widest = 2 ** math.ceil(math.log2(steps / (bound // 2)))
    gaps = [b - a for a, b in itertools.pairwise(stored)]
    assert max(gaps) <= 2 * widest
    # Each point kept its own numbers.
    assert all(r.values == {"loss": 1.0 / (r.step + 1)} for r in rows)


async def test_each_attempt_has_its_own_bound(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_metrics, "MAX_POINTS_PER_ATTEMPT", 10)
    await _job(store)
    for step in range(10):
        await store.append_metrics("j_1", 1, step, {"loss": 1.0}, 1.0)
    for step in range(11):
        await store.append_metrics("j_1", 2, step, {"loss": 2.0}, 2.0)
    assert len(await store.read_metrics("j_1", attempt=1)) == 10
    assert len(await store.read_metrics("j_1", attempt=2)) <= 6


async def test_a_rolled_back_point_is_not_counted(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_metrics, "MAX_POINTS_PER_ATTEMPT", 10)
    await _job(store)
    for step in range(8):
        await store.append_metrics("j_1", 1, step, {"loss": 1.0}, 1.0)

    def append_then_fail(repos: Repos) -> None:
        for step in range(100, 105):
            repos.metrics.append("j_1", 1, step, {"loss": 1.0}, 1.0)
        raise RuntimeError("the rest of the write failed")

    with pytest.raises(RuntimeError):
        await store.atomically(append_then_fail)
    await store.append_metrics("j_1", 1, 8, {"loss": 1.0}, 1.0)
    await store.append_metrics("j_1", 1, 9, {"loss": 1.0}, 1.0)
    # Ten stored, none thinned: the five rolled back were not counted.
    assert [r.step for r in await store.read_metrics("j_1")] == list(range(10))


async def test_a_deleted_job_takes_its_metrics_with_it(store: Store) -> None:
    await _job(store)
    await store.append_metrics("j_1", 1, 1, {"loss": 1.0}, 1.0)
    await store.db.write(lambda: Job.delete().where(Job.id == "j_1").execute())
    assert await store.read_metrics("j_1") == []


async def test_an_earlier_step_is_looked_up_even_after_a_restart(store: Store) -> None:
    await _job(store)
    for step in (1, 2, 3):
        await store.append_metrics("j_1", 1, step, {"loss": float(step)}, 1.0)
    restarted = Store(store.db)  # what it knew of the attempt is read again
    assert not await restarted.append_metrics("j_1", 1, 2, {"loss": 2.0}, 2.0)
    assert await restarted.append_metrics("j_1", 1, 2, {"loss": 0.2}, 2.0)
    assert await restarted.append_metrics("j_1", 1, 0, {"loss": 0.0}, 2.0)
    rows = await restarted.read_metrics("j_1")
    assert sorted((r.step, r.values["loss"]) for r in rows) == [
        (0, 0.0),
        (1, 1.0),
        (2, 0.2),
        (3, 3.0),
    ]
