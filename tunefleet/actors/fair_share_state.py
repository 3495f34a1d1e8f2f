"""The scheduler's fair-share state (issue 25): the teams' quotas, the usage ledger, and
the reclaims in flight, with the one seam through which a reclaim stops a job.

The decisions are fair_share.py's (pure); this keeps what they need between passes:
which victims are being preempted (never chosen twice while in flight), when each job
was last preempted (the protection window), and the ``preempt(job_id, reason)``
callable. Without a preempter the decision is logged and audited only.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from tunefleet.actors.fair_share import (
    DEFAULT_HALF_LIFE_S,
    DEFAULT_MIN_RUNTIME_S,
    Holding,
    QuotaBook,
    Reclaim,
    ReclaimRules,
    RunningJob,
    TeamQuota,
    UsageLedger,
    book_of,
    borrowing_jobs,
    choose_victim,
    protected,
    quota_view,
    reclaim_reason,
    standings,
)
from tunefleet.actors.matching import PendingJob, WorkerView, unmet
from tunefleet.usage import AttemptSpan

log = structlog.get_logger(__name__)

# h-preempt's Fleet.preempt(job_id, reason) fits this: an async function or a plain one.
Preempter = Callable[[str, str], Awaitable[object] | object]


@dataclass(frozen=True, slots=True)
class FairShareSettings:
    half_life_s: float = DEFAULT_HALF_LIFE_S
    min_runtime_before_preempt_s: float = DEFAULT_MIN_RUNTIME_S
    priority_preemption: bool = False


class FairShareState:
    def __init__(self, settings: FairShareSettings | None = None) -> None:
        settings = settings or FairShareSettings()
        self.settings = settings
        self.quotas: dict[str, TeamQuota] = {}
        self.ledger = UsageLedger(settings.half_life_s)
        self.rules = ReclaimRules(
            settings.min_runtime_before_preempt_s, settings.priority_preemption
        )
        self.inflight: dict[str, Reclaim] = {}  # victim job id -> the decision
        self.last_preempted: dict[str, float] = {}
        self.preempter: Preempter | None = None
        self.preemptions: dict[str | None, int] = {}  # per victim team, since start

    @property
    def active(self) -> bool:
        """Some team has a quota or a weight, or priority preemption is on: without, the
        pass is matching.plan()."""
        return bool(self.quotas) or self.rules.priority_preemption

    def set_quotas(self, quotas: Mapping[str, TeamQuota]) -> None:
        self.quotas = {name: q for name, q in quotas.items() if not q.is_default}

    def load_attempts(self, spans: Iterable[AttemptSpan]) -> None:
        """The ended attempts, read at start (running ones are seen by the first pass)."""
        for span in spans:
            if span.ended_at is not None:
                self.ledger.add_ended(span.team, span.gpus, span.dispatched_at, span.ended_at)

    def observe(
        self,
        running: Sequence[RunningJob],
        now: float,
        free: Callable[[str], bool] = lambda worker_id: True,
    ) -> dict[str | None, float]:
        """Told who holds GPUs now (and, by ``free``, which workers are free to give
        out); the teams' standings at ``now``."""
        self.ledger.observe(
            (Holding(j.job_id, j.team, j.gpus, j.since, j.worker_id) for j in running), now
        )
        holding = {job.job_id for job in running}
        for victim, decision in list(self.inflight.items()):
            # Done once the victim stopped and its worker is free: until then the job it
            # was for waits for that worker rather than reclaiming another.
            if victim not in holding and free(decision.worker_id):
                del self.inflight[victim]
        window = self.rules.min_runtime_s
        for job_id in [j for j, at in self.last_preempted.items() if now - at >= window]:
            del self.last_preempted[job_id]  # out of its protection: nothing to remember
        return standings(self.ledger.decayed(now), self.quotas)

    def standings_view(self, running: Sequence[RunningJob], now: float) -> dict[str, Any]:
        """Per team with a quota, GPUs held or used: quota, use, borrowed, standing and
        preemptions (GET /api/queue/stats' fair_share)."""
        standing = self.observe(running, now)
        book = book_of(self.quotas, running)
        used = {j.team for j in running} | {t for t, v in standing.items() if v > 0}
        teams = sorted(set(self.quotas) | {t for t in used if t is not None})
        return {
            team: {
                "quota": quota_view(book.quota(team)),
                "used_gpus": book.used(team),
                "borrowed_gpus": book.borrowed(team),
                "standing": round(standing.get(team, 0.0), 3),
                "preemptions": self.preemptions.get(team, 0),
            }
            for team in teams
        }

    def reclaims(
        self,
        waiting: Sequence[PendingJob],
        running: Sequence[RunningJob],
        book: QuotaBook,
        fleet: Mapping[str, WorkerView],
        now: float,
    ) -> list[Reclaim]:
        """For the jobs still waiting after a pass (in pass order), the victims to preempt:
        one worker each, none already being reclaimed, none for a job a reclaim in flight
        already serves. ``book`` is updated as if each reclaim had happened."""
        waits = {job.job_id for job in waiting}
        claimed_for = {r.job_id for r in self.inflight.values() if r.job_id in waits}
        # A worker still being freed for a job that no longer waits (another job of its
        # team took the worker freed first) serves the team's next waiting job it fits:
        # else that job reclaims a further victim, one preemption too many.
        for orphan in (r for r in self.inflight.values() if r.job_id not in waits):
            view = fleet.get(orphan.worker_id)
            heir = next(
                (
                    job
                    for job in waiting
                    if job.team == orphan.team
                    and job.job_id not in claimed_for
                    and view is not None
                    and unmet(job.requirements, view) is None
                ),
                None,
            )
            if heir is not None:
                claimed_for.add(heir.job_id)
        if not any(self._may_reclaim_for(job, book) for job in _one_per_team(waiting)):
            return []  # no waiting team is below its quota: nothing to reclaim for
        borrowers = borrowing_jobs(self.quotas, running)
        # Only these may ever be chosen in this pass: found once, not once per job.
        candidates = [
            job
            for job in running
            if job.job_id not in self.inflight
            and (job.job_id in borrowers or self.rules.priority_preemption)
            and not protected(job, now, self.last_preempted, self.rules)
        ]
        if not candidates:
            return []
        decisions: list[Reclaim] = []
        fits_by_key: dict[object, dict[str, bool]] = {}
        # A team and requirements that found no victim find none for the next such job
        # either (until a victim is taken): a long queue costs one look per kind of job.
        hopeless: set[tuple[str | None, int, object]] = set()
        may: dict[str | None, bool] = {}  # per team, until a victim is taken
        for job in waiting:
            if job.job_id in claimed_for:
                continue
            if job.team not in may:
                may[job.team] = self._may_reclaim_for(job, book)
            if not may[job.team]:
                continue
            key = job.requirements.key()
            if (job.team, job.priority, key) in hopeless:
                continue
            fits = fits_by_key.get(key)
            if fits is None:
                fits = {
                    r.worker_id: (view := fleet.get(r.worker_id)) is not None
                    and view.connected
                    and unmet(job.requirements, view) is None
                    for r in candidates
                }
                fits_by_key[key] = fits
            victim = choose_victim(
                job.team,
                job.priority,
                job.requirements.gpu_count,
                fits,
                candidates,
                book,
                borrowers,
                now,
                self.last_preempted,
                self.rules,
            )
            if victim is None:
                hopeless.add((job.team, job.priority, key))
                continue
            hopeless.clear()
            may.clear()
            candidates.remove(victim)
            book.add(victim.team, victim.gpu_name, -victim.gpus)
            book.add(job.team, victim.gpu_name, job.requirements.gpu_count)
            why = reclaim_reason(victim, job.team, victim.team != job.team)
            decisions.append(
                Reclaim(job.job_id, job.team, victim.job_id, victim.team, victim.worker_id, why)
            )
            if not candidates:
                break
        return decisions

    def may_reclaim(self, waiting: Iterable[PendingJob], book: QuotaBook) -> bool:
        """Some waiting job's team is below its quota (or priority preemption is on):
        without one, there is nothing to reclaim for and the queue need not be sorted."""
        return any(self._may_reclaim_for(job, book) for job in _one_per_team(waiting))

    def _may_reclaim_for(self, job: PendingJob, book: QuotaBook) -> bool:
        quota = book.quota(job.team)
        if self.rules.priority_preemption:
            return True
        return quota.has_quota and book.borrowed(job.team) == 0

    def next_unprotected(self, running: Sequence[RunningJob], now: float) -> float | None:
        """When the first protected job that could be a victim (a borrower; any job with
        priority preemption) becomes preemptable: the scheduler looks again then."""
        if not self.rules.priority_preemption:
            borrowers = borrowing_jobs(self.quotas, running)
            running = [job for job in running if job.job_id in borrowers]
        ends = [
            max(job.since, self.last_preempted.get(job.job_id, job.since))
            + self.rules.min_runtime_s
            for job in running
        ]
        later = [end for end in ends if end > now]
        return min(later) if later else None

    def failed(self, decision: Reclaim) -> None:
        """The preempter refused or failed: the victim is not being stopped (it stays
        protected for the window, so the next pass looks elsewhere)."""
        self.inflight.pop(decision.victim, None)

    def started(self, decision: Reclaim, now: float) -> Awaitable[object] | None:
        """Recorded as in flight, and handed to the preempter (if one is wired)."""
        self.inflight[decision.victim] = decision
        self.last_preempted[decision.victim] = now
        self.preemptions[decision.victim_team] = self.preemptions.get(decision.victim_team, 0) + 1
        if self.preempter is None:
            log.info(
                "reclaim decided; no preempter wired",
                victim=decision.victim,
                job=decision.job_id,
                why=decision.why,
            )
            return None
        result = self.preempter(decision.victim, decision.why)
        return result if inspect.isawaitable(result) else None


def _one_per_team(jobs: Iterable[PendingJob]) -> list[PendingJob]:
    seen: dict[str | None, PendingJob] = {}
    for job in jobs:
        seen.setdefault(job.team, job)
    return list(seen.values())
