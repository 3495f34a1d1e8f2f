"""The matching pass under team quotas (issue 25): matching.plan()'s placement, in fair-
share order. Pure, like matching.py; fair_share.py holds the policy it asks.

Order among the pending jobs: priority (high first); then, within one priority, the jobs
whose team's quota covers the worker they would get before the jobs that would borrow;
then the team's standing (lower first); then submission order. A job that would take its
team past quota + borrowing limit is skipped like one nothing fits. Used only while some
team has a quota or a weight: a fleet without them keeps matching.plan() unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby

from tunefleet.actors.fair_share import QuotaBook, Verdict, verdict
from tunefleet.actors.matching import PendingJob, WorkerView
from tunefleet.actors.matching_index import (
    SIDES,
    FleetIndex,
    RequirementsKey,
    fits,
)
from tunefleet.actors.tenancy_limits import LimitGate

_NEVER = 1 << 62


def plan_fair(
    pending: Sequence[PendingJob],
    idle_workers: Iterable[WorkerView],
    book: QuotaBook,
    standing: Mapping[str | None, float],
    gate: LimitGate | None = None,
) -> list[tuple[str, str]]:
    """``[(job_id, worker_id), ...]``; ``book`` is told of each placement."""
    index = FleetIndex({w.worker_id: w for w in idle_workers if w.connected}.values())
    hopeless: set[RequirementsKey] = set()
    # Per team without flavors, the fewest GPUs found past its borrowing limit: its use
    # only grows in a pass, so its jobs of as many GPUs or more are skipped unasked.
    capped: dict[str | None, int] = {}
    # Likewise the fewest GPUs found borrowing: such jobs wait for the borrowers' turn.
    lending: dict[str | None, int] = {}
    placements: list[tuple[str, str]] = []
    ordered = sorted(
        pending, key=lambda j: (-j.priority, standing.get(j.team, 0.0), j.seq, j.job_id)
    )
    for _, band in groupby(ordered, key=lambda j: j.priority):
        borrowers: list[PendingJob] = []
        for job in band:  # first the jobs within their quota
            if index.free == 0:
                return placements
            gpus = job.requirements.gpu_count
            if gpus >= capped.get(job.team, _NEVER):
                continue  # inline: most of a long queue past its limits ends here
            if gpus >= lending.get(job.team, _NEVER):
                borrowers.append(job)
                continue
            placed = _place(job, index, book, gate, hopeless, capped, Verdict.WITHIN)
            if placed is Verdict.BORROW:
                borrowers.append(job)
                if not book.quota(job.team).flavors:
                    lending[job.team] = min(gpus, lending.get(job.team, gpus))
            elif isinstance(placed, str):
                placements.append((job.job_id, placed))
        for job in borrowers:  # then those that borrow idle GPUs
            if index.free == 0:
                return placements
            if job.requirements.gpu_count >= capped.get(job.team, _NEVER):
                continue
            placed = _place(job, index, book, gate, hopeless, capped, Verdict.BORROW)
            if isinstance(placed, str):
                placements.append((job.job_id, placed))
    return placements


def _place(
    job: PendingJob,
    index: FleetIndex,
    book: QuotaBook,
    gate: LimitGate | None,
    hopeless: set[RequirementsKey],
    capped: dict[str | None, int],
    allowed: Verdict,
) -> str | Verdict | None:
    """The worker taken for ``job``; Verdict.BORROW when it would borrow and only
    quota-covered placements are allowed now; None when it cannot run now."""
    key = job.requirements.key()
    gpus = job.requirements.gpu_count
    if key in hopeless or gpus >= capped.get(job.team, gpus + 1):
        return None
    if gate is not None and not gate.allows(job.holder()):
        return None
    rank = _best_outside(index, key, job.exclude)
    if rank is None:
        if not job.exclude:  # nothing fits the requirements themselves
            hopeless.add(key)
        return None
    worker = index.workers[rank]
    found = book.verdict(job.team, worker.gpu_name, gpus)
    flavored = bool(book.quota(job.team).flavors)
    if found is not Verdict.WITHIN and flavored and not job.exclude:
        # The best fit is outside what the team's flavors still cover: a worker of a
        # flavor it has room in is taken instead, before any borrowing.
        other = _within_flavor(job, key, index, book)
        if other is not None:
            rank, worker, found = other, index.workers[other], Verdict.WITHIN
    if found is Verdict.CAPPED:
        if not flavored:
            capped[job.team] = min(gpus, capped.get(job.team, gpus))
        return None
    if found is Verdict.BORROW and allowed is Verdict.WITHIN:
        return Verdict.BORROW
    index.take(rank)
    if gate is not None:
        gate.take(job.holder())
    book.add(job.team, worker.gpu_name, gpus)
    return worker.worker_id


def _best_outside(index: FleetIndex, key: RequirementsKey, exclude: frozenset[str]) -> int | None:
    """The best free worker for ``key`` outside ``exclude`` (a retry's workers to keep
    off: retry_policy.py): through the index when there are none, else by walking the
    free workers in fit order (rare: retries after failures)."""
    if not exclude:
        return index.best_for(key)
    for is_local in SIDES[key.target]:
        for rank, worker in enumerate(index.workers):
            if (
                not index.taken[rank]
                and worker.is_local == is_local
                and worker.worker_id not in exclude
                and fits(key, worker)
            ):
                return rank
    return None


def _within_flavor(
    job: PendingJob, key: RequirementsKey, index: FleetIndex, book: QuotaBook
) -> int | None:
    """The best free worker the job fits on which its team's quota covers it, if any:
    through the index for a flavor glob when the job names no GPU, else by walking the
    free workers in fit order (only for a team with flavors whose best fit is outside
    them)."""
    quota = book.quota(job.team)
    gpus = job.requirements.gpu_count
    use = book.use.get(job.team, {})
    if key.gpu_name is None:
        for glob in quota.flavors:
            if verdict(quota, use, glob, gpus) is not Verdict.WITHIN:
                continue
            rank = index.best_for(key._replace(gpu_name=glob.lower()))
            if rank is not None and book.verdict(job.team, index.workers[rank].gpu_name, gpus) is (
                Verdict.WITHIN
            ):
                return rank
    for rank, worker in enumerate(index.workers):
        if (
            not index.taken[rank]
            and worker.is_local in SIDES[key.target]
            and fits(key, worker)
            and book.verdict(job.team, worker.gpu_name, gpus) is Verdict.WITHIN
        ):
            return rank
    return None
