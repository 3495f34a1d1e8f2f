"""Micro-benchmark of the scheduler's pure matching core (tunefleet.actors.matching).

`run()` returns rows {name, value, unit, target, note}; bench/__main__.py collects them.
Numbers, never assertions: the target column says what "good" means for each row.
Run alone with `python -m bench.scheduler_plan` (or `python bench/scheduler_plan.py`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from tunefleet.actors.idle_workers import IdleWorkers
from tunefleet.actors.matching import PendingJob, Requirements, WorkerView, plan, unmet
from tunefleet.actors.wait_reasons import wait_reason

WORKERS = 5_000
JOBS = 10_000
GPU_TYPES = ("a10", "a100", "a100-80g", "h100", "l40s")
GPU_NAMES = ("NVIDIA A10", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA L40S")


def _fleet(rng: random.Random, *, unique_labels: bool = False) -> list[WorkerView]:
    workers = [WorkerView("local", True, {"location": "orchestrator"}, 2, 80.0, GPU_NAMES[2])]
    for i in range(WORKERS - 1):
        labels = {"gpu_type": rng.choice(GPU_TYPES), "zone": f"z{i % 4}", "team": rng.choice("ab")}
        if unique_labels:  # agents often report their hostname: every worker its own shape
            labels["hostname"] = f"gpu-node-{i:05}"
        workers.append(
            WorkerView(
                worker_id=f"w_{rng.getrandbits(48):012x}",
                is_local=False,
                labels=labels,
                gpu_count=rng.choice((1, 1, 1, 2, 2, 4, 8)),
                gpu_vram_gb=rng.choice((24.0, 40.0, 48.0, 80.0)),
                gpu_name=rng.choice(GPU_NAMES),
            )
        )
    return workers


def _shapes(rng: random.Random, count: int) -> list[Requirements]:
    shapes = []
    for _ in range(count):
        labels = {}
        if rng.random() < 0.5:
            labels["gpu_type"] = rng.choice(("a100*", "h100", "l40s", "a10"))
        if rng.random() < 0.3:
            labels["zone"] = f"z{rng.randrange(4)}"
        shapes.append(
            Requirements(
                target=rng.choice(("worker", "worker", "auto")),
                labels=labels,
                gpu_count=rng.choice((1, 1, 2, 4, 8)),
                min_vram_gb=rng.choice((None, None, 40.0, 80.0)),
                gpu_name=rng.choice((None, None, None, "*H100*")),
            )
        )
    return shapes


def _jobs(rng: random.Random, shapes: list[Requirements]) -> list[PendingJob]:
    return [
        PendingJob(f"j_{seq}", rng.choice((0, 0, 0, 1, 5)), seq, rng.choice(shapes))
        for seq in range(JOBS)
    ]


def _best_s(fn: Callable[[], object], repeats: int = 5) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def _plan_row(
    name: str, jobs: list[PendingJob], workers: list[WorkerView], target_ms: float, note: str
) -> dict[str, Any]:
    seconds, placements = _best_s(lambda: plan(jobs, workers))
    placed = len(placements)  # type: ignore[arg-type]
    return {
        "name": name,
        "value": round(seconds * 1000, 1),
        "unit": "ms",
        "target": f"< {target_ms:g} ms",
        "note": f"{note}; {placed} placed (best of 5)",
    }


def run() -> list[dict[str, Any]]:
    rng = random.Random(20240601)
    fleet = _fleet(rng)
    shapes = _shapes(rng, 20)
    rows = [
        _plan_row(
            "plan_shared_requirements",
            _jobs(rng, shapes),
            fleet,
            250,
            f"{JOBS} pending x {WORKERS} idle, 20 requirement shapes",
        ),
        _plan_row(
            "plan_unique_worker_labels",
            _jobs(rng, shapes),
            _fleet(rng, unique_labels=True),
            250,
            "as above, but every worker has its own hostname label",
        ),
    ]
    # Every job distinct (a different VRAM floor each): no memo to share, the skip links work.
    distinct = [
        PendingJob(f"j_{i}", 0, i, Requirements("worker", {"gpu_type": "a*"}, 1, 1 + i / JOBS))
        for i in range(JOBS)
    ]
    rows.append(
        _plan_row(
            "plan_all_distinct_requirements",
            distinct,
            fleet,
            500,
            f"{JOBS} jobs, each its own requirements key",
        )
    )
    backlog = [
        PendingJob(f"j_{i}", 0, i, Requirements("worker", {"gpu_type": f"b{i % 500}"}))
        for i in range(JOBS)
    ]
    rows.append(
        _plan_row(
            "plan_unplaceable_backlog",
            backlog,
            fleet,
            100,
            f"{JOBS} jobs nobody fits (500 unknown labels) in front of {WORKERS} idle workers",
        )
    )
    # A worker turning idle triggers a pass over the whole queue; here only the last job fits.
    lone = WorkerView("w_lone", False, {"gpu_type": "b200"}, 8, 192.0, "NVIDIA B200")
    last = PendingJob("j_last", 0, JOBS, Requirements("worker", {"gpu_type": "b200"}))
    queue = [*_jobs(rng, shapes)[:-1], last]
    rows.append(
        _plan_row(
            "plan_one_idle_worker",
            queue,
            [lone],
            50,
            f"{JOBS} pending, one idle worker that fits only the last job",
        )
    )
    rows += _one_job_rows(fleet, shapes)
    # The longest explanation: every requirement is met somewhere, never all at once
    # (only the local runner has the label; it has 2 GPUs).
    req = Requirements("auto", {"location": "orchestrator"}, 4, 40.0, "*H100*")
    idle = {w.worker_id for w in fleet[::2]}
    seconds, reason = _best_s(lambda: wait_reason(req, fleet, idle))
    rows.append(
        {
            "name": "wait_reason_5k_fleet",
            "value": round(seconds * 1000, 2),
            "unit": "ms",
            "target": "< 20 ms",
            "note": f"one explanation over {WORKERS} workers: {reason}",
        }
    )
    fits = Requirements("worker", {"gpu_type": "*", "zone": "z*"}, 1, 24.0, "NVIDIA*")
    worker, calls = fleet[1], 50_000
    seconds, _ = _best_s(lambda: [unmet(fits, worker) for _ in range(calls)])
    rows.append(
        {
            "name": "unmet_per_call",
            "value": round(seconds / calls * 1e6, 3),
            "unit": "us",
            "target": "< 10 us",
            "note": "a worker meeting 5 requirements (HasWorkFor runs this per pending job)",
        }
    )
    return rows


def _one_job_rows(fleet: list[WorkerView], shapes: list[Requirements]) -> list[dict[str, Any]]:
    """The common pass: one job just submitted, the idle workers kept in fit order by the
    scheduler (IdleWorkers) between passes; at 1 and at 5,000 idle workers."""
    rows = []
    per_size = {}
    for size in (1, WORKERS):
        pool = IdleWorkers(fleet[-size:])  # fleet[-1:]: one remote worker
        jobs = [[PendingJob("j", 0, 1, shape)] for shape in (Requirements("worker"), *shapes)]
        seconds = sum(_best_s(lambda j=j, p=pool: plan(j, p), 50)[0] for j in jobs) / len(jobs)
        per_size[size] = seconds
        rows.append(
            {
                "name": f"plan_one_job_{size}_idle",
                "value": round(seconds * 1e6, 1),
                "unit": "us",
                "target": "< 50 us",
                "note": f"one pending job, {size} idle workers in fit order; mean over "
                f"{len(jobs)} requirement shapes (best of 50 each)",
            }
        )
    rows[-1]["note"] += f"; {per_size[WORKERS] / per_size[1]:.1f}x the 1-worker figure"
    rows[-1]["note"] += " (a full scan of the workers took about 800 us)"
    pool = IdleWorkers(fleet)
    moved, calls = fleet[1:1001], 1000
    seconds, _ = _best_s(lambda: [(pool.discard(w.worker_id), pool.add(w)) for w in moved])
    rows.append(
        {
            "name": "idle_workers_discard_add",
            "value": round(seconds / calls * 1e6, 2),
            "unit": "us",
            "target": "< 10 us",
            "note": f"a worker leaving and rejoining the fit order of {WORKERS} idle workers",
        }
    )
    return rows


if __name__ == "__main__":
    for row in run():
        print(
            f"{row['name']:<32} {row['value']:>8} {row['unit']:<3} {row['target']:<9} {row['note']}"
        )
