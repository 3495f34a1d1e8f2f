"""plan() scans the idle workers when only a few jobs wait: the scan must choose exactly
what the index would (best fit, remote first for auto, never a worker twice)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunefleet.actors import matching
from tunefleet.actors.matching import PendingJob, Requirements, WorkerView, plan

EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def workers(draw: st.DrawFn) -> list[WorkerView]:
    count = draw(st.integers(0, 14))
    return [
        WorkerView(
            worker_id=f"w_{draw(st.integers(0, 20)):02}",  # duplicates on purpose
            is_local=draw(st.integers(0, 5)) == 0,
            labels={"pool": draw(st.sampled_from(["a", "b", "ab"]))} if draw(st.booleans()) else {},
            gpu_count=draw(st.sampled_from([0, 1, 2, 4])),
            gpu_vram_gb=draw(st.sampled_from([None, 24.0, 80.0])),
            gpu_name=draw(st.sampled_from([None, "NVIDIA A100", "NVIDIA H100"])),
        )
        for _ in range(count)
    ]


@st.composite
def jobs(draw: st.DrawFn) -> list[PendingJob]:
    count = draw(st.integers(0, matching.SCAN_BELOW_JOBS - 1))
    return [
        PendingJob(
            job_id=f"j_{draw(st.integers(0, 3))}",  # a job offered twice is placed once
            priority=draw(st.integers(0, 2)),
            seq=i,
            requirements=Requirements(
                target=draw(st.sampled_from(["worker", "local", "auto"])),
                labels={"pool": draw(st.sampled_from(["a*", "b", "*"]))}
                if draw(st.booleans())
                else {},
                gpu_count=draw(st.sampled_from([0, 1, 2])),
                min_vram_gb=draw(st.sampled_from([None, 40.0])),
                gpu_name=draw(st.sampled_from([None, "*a100*"])),
            ),
        )
        for i in range(count)
    ]


def _indexed(pending: list[PendingJob], idle: list[WorkerView]) -> list[tuple[str, str]]:
    # The index path of plan(), forced by padding the queue with jobs nothing can take.
    impossible = Requirements(target="worker", gpu_count=10_000)
    padding = [PendingJob(f"pad_{i}", -100, 10_000 + i, impossible) for i in range(4)]
    return [p for p in plan([*pending, *padding], idle) if not p[0].startswith("pad_")]


@EXAMPLES
@given(workers(), jobs())
def test_the_scan_places_exactly_as_the_index_does(
    idle: list[WorkerView], pending: list[PendingJob]
) -> None:
    assert plan(pending, idle) == _indexed(pending, idle)


def test_auto_prefers_a_remote_worker_and_takes_the_best_fit() -> None:
    idle = [
        WorkerView("w_local", is_local=True, gpu_count=1, gpu_vram_gb=24.0),
        WorkerView("w_big", gpu_count=4, gpu_vram_gb=80.0),
        WorkerView("w_small", gpu_count=1, gpu_vram_gb=80.0),
        WorkerView("w_smaller", gpu_count=1, gpu_vram_gb=40.0),
    ]
    job = PendingJob("j_1", 0, 1, Requirements(target="auto", gpu_count=1, min_vram_gb=40.0))
    assert plan([job], idle) == [("j_1", "w_smaller")]
    only_local = PendingJob("j_2", 0, 2, Requirements(target="auto", gpu_count=1))
    assert plan([only_local], idle[:1]) == [("j_2", "w_local")]
