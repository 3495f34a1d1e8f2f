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
    gpu_name_matches,
)
from tunefleet.actors.tenancy_limits import LimitGate


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
    placements: list[tuple[str, str]] = []
    ordered = sorted(
        pending, key=lambda j: (-j.priority, standing.get(j.team, 0.0), j.seq, j.job_id)
    )
    for _, band in groupby(ordered, key=lambda j: j.priority):
        borrowers: list[PendingJob] = []
        for job in band:  # first the jobs within their quota
            if index.free == 0:
                return placements
            placed = _place(job, index, book, gate, hopeless, Verdict.WITHIN)
            if placed is Verdict.BORROW:
                borrowers.append(job)
            elif isinstance(placed, str):
                placements.append((job.job_id, placed))
        for job in borrowers:  # then those that borrow idle GPUs
            if index.free == 0:
                return placements
            placed = _place(job, index, book, gate, hopeless, Verdict.BORROW)
            if isinstance(placed, str):
                placements.append((job.job_id, placed))
    return placements


def _place(
    job: PendingJob,
    index: FleetIndex,
    book: QuotaBook,
    gate: LimitGate | None,
    hopeless: set[RequirementsKey],
    allowed: Verdict,
) -> str | Verdict | None:
    """The worker taken for ``job``; Verdict.BORROW when it would borrow and only
    quota-covered placements are allowed now; None when it cannot run now."""
    key = job.requirements.key()
    if key in hopeless:
        return None
    holder = job.holder()
    if gate is not None and not gate.allows(holder):
        return None
    rank = index.best_for(key)
    if rank is None:
        hopeless.add(key)
        return None
    worker = index.workers[rank]
    found = book.verdict(job.team, worker.gpu_name, holder.gpus)
    if found is not Verdict.WITHIN and book.quota(job.team).flavors:
        # The best fit is outside what the team's flavors still cover: a worker of a
        # flavor it has room in is taken instead, before any borrowing.
        other = _within_flavor(job, key, index, book)
        if other is not None:
            rank, worker, found = other, index.workers[other], Verdict.WITHIN
    if found is Verdict.CAPPED:
        return None
    if found is Verdict.BORROW and allowed is Verdict.WITHIN:
        return Verdict.BORROW
    index.take(rank)
    if gate is not None:
        gate.take(holder)
    book.add(job.team, worker.gpu_name, holder.gpus)
    return worker.worker_id


def _within_flavor(
    job: PendingJob, key: RequirementsKey, index: FleetIndex, book: QuotaBook
) -> int | None:
    """The best free worker the job fits on which its team's quota covers it, if any."""
    quota = book.quota(job.team)
    gpus = job.requirements.gpu_count
    use = book.use.get(job.team, {})
    for glob in quota.flavors:
        if verdict(quota, use, glob, gpus) is not Verdict.WITHIN:
            continue
        if key.gpu_name is None:  # the flavor's glob narrows the job's: the index finds it
            rank = index.best_for(key._replace(gpu_name=glob.lower()))
            candidates = [] if rank is None else [rank]
        else:  # two globs at once: walk the free workers in fit order
            candidates = [
                r
                for r, w in enumerate(index.workers)
                if not index.taken[r]
                and w.is_local in SIDES[key.target]
                and fits(key, w)
                and gpu_name_matches(w.gpu_name, glob.lower())
            ]
        for rank in candidates[:1]:
            name = index.workers[rank].gpu_name
            if book.verdict(job.team, name, gpus) is Verdict.WITHIN:
                return rank
    return None
