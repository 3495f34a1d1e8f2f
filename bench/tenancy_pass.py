"""A scheduling pass under concurrency limits (issue 24), and under team quotas (issue
25), against the same pass without.

10,000 pending jobs of 100 users in 20 teams, 5,000 idle workers, 2,000 jobs already
running (the counts a limited pass starts from). With limits: the running jobs are
counted (tenancy_limits.usage_of, as Scheduler.usage does from the job actors) and each
job is asked of the LimitGate in queue order. With quotas (every team has a quota, a
weight and a borrowing limit): the running jobs' standing and GPUs per team are counted
(FairShareState.observe, book_of, as Scheduler._run_fair_pass does), the pass is
fair_plan.plan_fair(), and the reclaims its leftover jobs call for are chosen.
Without: plan() alone, the fast path.
Numbers, never assertions; the target says the limited pass may take at most 2x.
Run alone with `python -m bench tenancy_pass`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from tunefleet.actors.fair_plan import plan_fair
from tunefleet.actors.fair_share import RunningJob, TeamQuota, book_of
from tunefleet.actors.fair_share_state import FairShareSettings, FairShareState
from tunefleet.actors.idle_workers import IdleWorkers
from tunefleet.actors.matching import PendingJob, Requirements, WorkerView, plan
from tunefleet.actors.tenancy_limits import (
    ConcurrencyLimits,
    Holder,
    LimitGate,
    TeamLimits,
    usage_of,
)

JOBS, USERS, TEAMS, WORKERS, RUNNING = 10_000, 100, 20, 5_000, 2_000


def _setup(rng: random.Random) -> tuple[list[PendingJob], list[WorkerView], list[Holder]]:
    team_of = {f"u{u:03}": f"t{u % TEAMS:02}" for u in range(USERS)}
    users = list(team_of)
    jobs = []
    for seq in range(JOBS):
        user = rng.choice(users)
        req = Requirements("worker", {}, rng.choice((1, 1, 2, 4, 8)))
        jobs.append(
            PendingJob(f"j_{seq}", rng.choice((0, 0, 1)), seq, req, user=user, team=team_of[user])
        )
    workers = [
        WorkerView(f"w_{i:05}", gpu_count=rng.choice((1, 2, 4, 8)), gpu_vram_gb=80.0)
        for i in range(WORKERS)
    ]
    running = []
    for _ in range(RUNNING):
        user = rng.choice(users)
        running.append(Holder(user, team_of[user], rng.choice((1, 2, 4))))
    return jobs, workers, running


def _best_s(fn: Callable[[], object], repeats: int = 5) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def run() -> list[dict[str, Any]]:
    rng = random.Random(20261128)
    jobs, workers, running = _setup(rng)
    limits = ConcurrencyLimits(
        max_concurrent=6_000,
        user_max_concurrent=40,
        teams={f"t{t:02}": TeamLimits(max_jobs=250, max_gpus=600) for t in range(TEAMS)},
    )

    def unlimited() -> object:
        return plan(jobs, IdleWorkers(workers))

    def limited() -> object:
        return plan(jobs, IdleWorkers(workers), LimitGate(limits, usage_of(running)))

    # IdleWorkers is built inside both: the scheduler keeps it, so it costs both the same.
    fair = FairShareState(FairShareSettings(min_runtime_before_preempt_s=0))
    fair.set_quotas(
        {f"t{t:02}": TeamQuota(gpus=300, weight=1 + t % 3, borrow_limit=200) for t in range(TEAMS)}
    )
    busy = [
        WorkerView(f"b_{i:05}", gpu_count=holder.gpus, gpu_vram_gb=80.0)
        for i, holder in enumerate(running)
    ]
    held = [
        RunningJob(f"r_{i}", h.team, 0, h.gpus, busy[i].worker_id, None, 1000.0 + i)
        for i, h in enumerate(running)
    ]
    fleet = {w.worker_id: w for w in (*workers, *busy)}
    now = 1_000_000.0

    def with_quotas() -> object:
        standing = fair.observe(held, now)
        book = book_of(fair.quotas, held)
        placed = plan_fair(jobs, IdleWorkers(workers).values(), book, standing)
        done = {job_id for job_id, _ in placed}
        waiting = [job for job in jobs if job.job_id not in done]
        waiting.sort(key=lambda j: (-j.priority, standing.get(j.team, 0.0), j.seq))
        fair.reclaims(waiting, held, book, fleet, now)
        return placed

    free_s, free_placed = _best_s(unlimited)
    held_s, held_placed = _best_s(limited)
    quota_s, quota_placed = _best_s(with_quotas)
    ratio = held_s / free_s
    shape = f"{JOBS} pending of {USERS} users in {TEAMS} teams, {WORKERS} idle workers"
    return [
        {
            "name": "pass_without_limits",
            "value": round(free_s * 1000, 1),
            "unit": "ms",
            "target": "baseline",
            "note": f"{shape}; {len(free_placed)} placed (best of 5)",  # type: ignore[arg-type]
        },
        {
            "name": "pass_with_limits",
            "value": round(held_s * 1000, 1),
            "unit": "ms",
            "target": "<= 2x baseline",
            "note": f"{shape}, {RUNNING} running counted; max_concurrent, user_max_concurrent "
            f"and team jobs/GPUs set; {len(held_placed)} placed (best of 5)",  # type: ignore[arg-type]
        },
        {
            "name": "pass_with_quotas",
            "value": round(quota_s * 1000, 1),
            "unit": "ms",
            "target": "<= 2x baseline",
            "note": f"{shape}, {RUNNING} running counted; every team a quota, weight and "
            f"borrowing limit; standing, placing and reclaim choice; "
            f"{len(quota_placed)} placed (best of 5)",  # type: ignore[arg-type]
        },
        {
            "name": "pass_quotas_ratio",
            "value": round(quota_s / free_s, 2),
            "unit": "x",
            "target": "<= 2",
            "note": "with quotas / without",
        },
        {
            "name": "pass_limits_ratio",
            "value": round(ratio, 2),
            "unit": "x",
            "target": "<= 2",
            "note": "with limits / without",
        },
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
