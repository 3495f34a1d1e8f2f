"""Fair share of a contended fleet (issue 25), over a simulated day.

Three teams with fair-share weights 1:1:2 keep more work queued than 64 one-GPU
workers can run, for a simulated day on an accelerated (event-driven) clock. Team a
floods the idle fleet first, b arrives an hour later, c two hours later. The scheduling
is the product's own policy driven in process: fair_plan.plan_fair() for every pass,
FairShareState for standing and reclaims; a reclaim's victim stops after the preemption
grace (120 s) and its job queues again in its place. No actors, HTTP or agents: this
measures the policy, not the transport.

Two fleets: with quotas that match the weights (16, 16, 32 GPUs), where borrowing and
reclaim decide; and with weights only (no quota), where standing alone decides.
Reported: each team's share of the GPU-seconds (with quotas: once all three have
work; with weights only: of the whole day, as standing counts it) against its entitled
share (target: within ±5 % of it); utilisation while demand exceeds supply (target
≥ 95 %); preemptions per hour; time to reclaim (from the decision to the reclaiming
team's job starting on the worker: about the grace). Numbers, never assertions.
"""

from __future__ import annotations

import heapq
import random
import statistics
from dataclasses import dataclass, field
from typing import Any

from tunefleet.actors.fair_plan import plan_fair
from tunefleet.actors.fair_share import RunningJob, TeamQuota, book_of
from tunefleet.actors.fair_share_state import FairShareSettings, FairShareState
from tunefleet.actors.matching import PendingJob, Requirements, WorkerView

GPUS = 64
DAY_S = 86_400.0
GRACE_S = 120.0
MIN_RUNTIME_S = 600.0
WEIGHTS = {"a": 1.0, "b": 1.0, "c": 2.0}
ARRIVES = {"a": 0.0, "b": 3600.0, "c": 7200.0}
QUEUED = 40  # each team keeps at least this many jobs waiting once it has arrived


@dataclass
class Day:
    quotas: dict[str, TeamQuota]
    rng: random.Random
    measure_from: float  # shares count the GPU-seconds from then on
    now: float = 0.0
    seq: int = 0
    workers: dict[str, WorkerView] = field(default_factory=dict)
    running: dict[str, RunningJob] = field(default_factory=dict)  # by worker
    pending: dict[str, PendingJob] = field(default_factory=dict)
    jobs: dict[str, PendingJob] = field(default_factory=dict)
    ends: list[tuple[float, str, str]] = field(default_factory=list)  # (at, job, kind)
    gpu_s: dict[str, float] = field(default_factory=dict)  # once all three have work
    busy_s: float = 0.0
    preemptions: int = 0
    reclaim_waits: list[float] = field(default_factory=list)
    reclaiming: dict[str, tuple[float, str | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.fair = FairShareState(FairShareSettings(7 * 86_400.0, MIN_RUNTIME_S))
        self.fair.set_quotas(self.quotas)
        self.stopping: set[str] = set()
        self.fair.preempter = self._preempt
        for i in range(GPUS):
            self.workers[f"w{i:02}"] = WorkerView(f"w{i:02}", gpu_count=1, gpu_name="NVIDIA H100")

    def _preempt(self, job_id: str, reason: str) -> None:
        self.preemptions += 1
        self.stopping.add(job_id)
        heapq.heappush(self.ends, (self.now + GRACE_S, job_id, "preempted"))

    def _top_up(self) -> None:
        for team, at in ARRIVES.items():
            if self.now < at:
                continue
            waiting = sum(1 for j in self.pending.values() if j.team == team)
            for _ in range(QUEUED - waiting):
                self.seq += 1
                job = PendingJob(f"j{self.seq}", 0, self.seq, Requirements("worker"), team=team)
                self.pending[job.job_id] = self.jobs[job.job_id] = job

    def _advance(self, to: float) -> None:
        span = to - self.now
        self.busy_s += span * len(self.running)
        if self.now >= self.measure_from:
            for job in self.running.values():
                team = str(job.team)
                self.gpu_s[team] = self.gpu_s.get(team, 0.0) + span * job.gpus
        self.now = to

    def _pass(self) -> None:
        running = list(self.running.values())
        standing = self.fair.observe(running, self.now)
        book = book_of(self.fair.quotas, running)
        idle = [w for w_id, w in self.workers.items() if w_id not in self.running]
        for job_id, worker_id in plan_fair(list(self.pending.values()), idle, book, standing):
            job = self.pending.pop(job_id)
            self.running[worker_id] = RunningJob(
                job_id, job.team, 0, 1, worker_id, "NVIDIA H100", self.now
            )
            claim = self.reclaiming.pop(worker_id, None)
            if claim is not None and claim[1] == job.team:
                self.reclaim_waits.append(self.now - claim[0])
            length = self.rng.uniform(20 * 60, 100 * 60)
            heapq.heappush(self.ends, (self.now + length, job_id, "completed"))
        waiting = sorted(self.pending.values(), key=lambda j: (standing.get(j.team, 0.0), j.seq))
        running = list(self.running.values())
        for decision in self.fair.reclaims(waiting, running, book, self.workers, self.now):
            self.reclaiming[decision.worker_id] = (self.now, decision.team)
            self.fair.started(decision, self.now)

    def run(self) -> None:
        arrivals = sorted(ARRIVES.values())
        for at in arrivals:
            heapq.heappush(self.ends, (at, "", "arrival"))
        while self.ends:
            at, job_id, kind = heapq.heappop(self.ends)
            if at > DAY_S:
                break
            self._advance(at)
            worker = next((w for w, j in self.running.items() if j.job_id == job_id), None)
            if kind == "completed" and worker is not None and job_id not in self.stopping:
                del self.running[worker]
            elif kind == "preempted" and worker is not None:
                del self.running[worker]
                self.stopping.discard(job_id)
                self.pending[job_id] = self.jobs[job_id]  # its place kept, no retry spent
            self._top_up()
            self._pass()
            if not self.ends or self.ends[0][0] > self.now + 60:
                heapq.heappush(self.ends, (self.now + 60, "", "tick"))  # protection ends
        self._advance(DAY_S)


def _rows(label: str, day: Day) -> list[dict[str, Any]]:
    total = sum(day.gpu_s.values())
    weight = sum(WEIGHTS.values())
    rows = []
    worst = 0.0
    for team, w in WEIGHTS.items():
        share = day.gpu_s.get(team, 0.0) / total
        entitled = w / weight
        off = (share - entitled) / entitled
        worst = max(worst, abs(off))
        rows.append(
            {
                "name": f"{label}_share_{team}",
                "value": round(share * 100, 1),
                "unit": "%",
                "target": f"{entitled * 100:.1f} ±5 %",
                "note": f"weight {w:g}; {off * 100:+.1f} % of entitled",
            }
        )
    util = day.busy_s / (GPUS * DAY_S)
    waits = day.reclaim_waits
    hours = DAY_S / 3600
    rows += [
        {
            "name": f"{label}_share_worst",
            "value": round(worst * 100, 1),
            "unit": "% off",
            "target": "<= 5",
            "note": "largest relative gap between a team's share and its entitled share",
        },
        {
            "name": f"{label}_utilisation",
            "value": round(util * 100, 2),
            "unit": "%",
            "target": ">= 95",
            "note": "GPU-seconds held / GPU-seconds available; demand exceeds supply all day",
        },
        {
            "name": f"{label}_preemptions_per_hour",
            "value": round(day.preemptions / hours, 2),
            "unit": "/h",
            "target": "report",
            "note": f"{day.preemptions} in the day",
        },
        {
            "name": f"{label}_time_to_reclaim",
            "value": round(statistics.median(waits), 1) if waits else None,
            "unit": "s",
            "target": "report",
            "note": (
                f"median of {len(waits)}; max {max(waits):.0f} s; grace {GRACE_S:.0f} s"
                if waits
                else "no reclaim"
            ),
        },
    ]
    return rows


def run() -> list[dict[str, Any]]:
    weights_total = sum(WEIGHTS.values())
    with_quotas = {
        team: TeamQuota(gpus=round(GPUS * w / weights_total), weight=w)
        for team, w in WEIGHTS.items()
    }
    weights_only = {team: TeamQuota(weight=w) for team, w in WEIGHTS.items()}
    rows = []
    # Quotas entitle a team to GPUs at each moment: shares from when all three have work.
    # Standing evens out the decayed GPU-seconds themselves: shares of the whole day.
    runs = (("quotas", with_quotas, max(ARRIVES.values())), ("weights", weights_only, 0.0))
    for label, quotas, since in runs:
        day = Day(quotas, random.Random(25), since)
        day.run()
        rows += _rows(label, day)
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
