"""IdleWorkers keeps the scheduler's idle workers in fit order across joins, departures and
changed views; a placement that stops at the first fit must choose exactly what a plain
scan of the same workers would (naive_plan, the oracle of the matching properties)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.actors.test_matching_properties import fleets, job_mixes, naive_plan, requirements
from tunefleet.actors.idle_workers import IdleWorkers
from tunefleet.actors.matching import PendingJob, Requirements, WorkerView, plan

EXAMPLES = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def churn(draw: st.DrawFn) -> tuple[IdleWorkers, list[WorkerView]]:
    """A pool after random adds (new, repeated, changed, disconnected views) and discards,
    with the workers a plain dict of the same events would hold."""
    views = draw(fleets())
    pool, plain = IdleWorkers(), {}
    for _ in range(draw(st.integers(0, 30))):
        if views and draw(st.integers(0, 3)) > 0:
            view = draw(st.sampled_from(views))
            pool.add(view)
            if view.connected:
                plain[view.worker_id] = view
            else:
                plain.pop(view.worker_id, None)
        else:
            worker_id = draw(st.sampled_from([v.worker_id for v in views] + ["w_unknown"]))
            pool.discard(worker_id)
            plain.pop(worker_id, None)
    return pool, list(plain.values())


@EXAMPLES
@given(churn(), job_mixes())
def test_placement_in_fit_order_matches_a_plain_scan(
    state: tuple[IdleWorkers, list[WorkerView]], pending: list[PendingJob]
) -> None:
    pool, workers = state
    assert sorted(pool) == sorted(w.worker_id for w in workers)
    assert len(pool) == len(workers)
    few = pending[:3]  # the fit-order walk; the longer queue goes through the index
    assert plan(few, pool) == naive_plan(few, workers)
    assert plan(pending, pool) == naive_plan(pending, workers)
    assert plan(pending, workers) == naive_plan(pending, workers)


@EXAMPLES
@given(churn(), requirements(), st.data())
def test_best_for_skips_taken_workers(
    state: tuple[IdleWorkers, list[WorkerView]], req: Requirements, data: st.DataObject
) -> None:
    pool, workers = state
    taken = data.draw(st.sets(st.sampled_from([w.worker_id for w in workers] or ["w_none"])))
    free = [w for w in workers if w.worker_id not in taken]
    expected = naive_plan([PendingJob("j", 0, 1, req)], free)
    found = pool.best_for(req.key(), taken)
    assert ([("j", found.worker_id)] if found else []) == expected


def test_a_changed_view_moves_the_worker_and_a_lost_stream_drops_it() -> None:
    pool = IdleWorkers()
    pool.add(WorkerView("w_a", gpu_count=1, gpu_vram_gb=24.0))
    pool.add(WorkerView("w_b", gpu_count=1, gpu_vram_gb=40.0))
    one_gpu = Requirements(target="worker").key()
    assert pool.best_for(one_gpu).worker_id == "w_a"  # type: ignore[union-attr]
    pool.add(WorkerView("w_a", gpu_count=2, gpu_vram_gb=24.0))  # re-registered, more GPUs
    assert pool.best_for(one_gpu).worker_id == "w_b"  # type: ignore[union-attr]
    pool.add(WorkerView("w_b", gpu_count=1, gpu_vram_gb=40.0, connected=False))
    assert "w_b" not in pool and len(pool) == 1
    assert pool.best_for(one_gpu).worker_id == "w_a"  # type: ignore[union-attr]
    pool.discard("w_a")
    pool.discard("w_a")  # already gone: nothing to do
    assert pool.best_for(one_gpu) is None and not pool


def test_the_vram_floor_is_applied_in_every_gpu_count() -> None:
    pool = IdleWorkers(
        [
            WorkerView("w_1_small", gpu_count=1, gpu_vram_gb=24.0),
            WorkerView("w_2_small", gpu_count=2, gpu_vram_gb=24.0),
            WorkerView("w_2_unknown", gpu_count=2, gpu_vram_gb=None),
            WorkerView("w_4_big", gpu_count=4, gpu_vram_gb=80.0),
            WorkerView("w_2_big", gpu_count=2, gpu_vram_gb=80.0),
        ]
    )
    key = Requirements(target="worker", gpu_count=1, min_vram_gb=40.0).key()
    assert pool.best_for(key).worker_id == "w_2_big"  # type: ignore[union-attr]
    assert pool.best_for(key, {"w_2_big"}).worker_id == "w_4_big"  # type: ignore[union-attr]
