"""Fair share of a contended fleet (issue 25): team GPU quotas, borrowing, fair-share
standing, and the choice of preemption victims that reclaim borrowed GPUs.

Pure functions and small classes over plain values: no I/O, no asyncio, no clock (every
time is passed in). The scheduler calls in here; the property tests drive it directly.
docs/scheduling.md ("Fair share") is the user-facing version.

- A team's **quota** is a nominal GPU count: in all (``gpus``), per *flavor* (a gpu_name
  glob, case-insensitive like a job's ``gpu_name``: ``{"*A100*": 8}``), or both. A GPU the
  team holds on a worker whose name matches one of its flavors counts against that
  flavor's quota (the first glob in sorted order that matches); every GPU counts against
  the total. GPUs beyond what the quotas cover are **borrowed**: a team may borrow idle
  GPUs up to its ``borrow_limit`` (None: no limit).
- **Standing** is the team's decayed GPU-seconds divided by its weight: an attempt of g
  GPUs from s to e, seen at t, counts g x the integral of 2^-((t-u)/h) du over [s, e],
  h the half-life. Lower standing goes first among jobs of one priority.
- **Reclaim**: a job whose team would be within its quota on a worker held by another
  team's borrowing job may have that job preempted, never one younger than the minimum
  runtime nor one preempted within that window, and only when the job fits the worker.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tunefleet.actors.matching_index import gpu_name_matches
from tunefleet.errors import TunefleetError

DEFAULT_HALF_LIFE_S = 7 * 86_400.0  # Slurm's PriorityDecayHalfLife default
DEFAULT_MIN_RUNTIME_S = 600.0


class InvalidQuota(TunefleetError, ValueError):
    """A quota, weight or borrowing limit that cannot be (the message says which)."""

    status = 400


@dataclass(frozen=True, slots=True)
class TeamQuota:
    """One team's share: nominal GPUs (in all and/or per flavor glob), fair-share weight,
    borrowing limit. None is "not set" (no total quota; borrowing unlimited)."""

    gpus: int | None = None
    flavors: Mapping[str, int] = field(default_factory=dict)
    weight: float = 1.0
    borrow_limit: int | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.weight) or self.weight <= 0:
            raise InvalidQuota(f"weight must be a number above 0; got {self.weight}")
        if self.gpus is not None and self.gpus < 0:
            raise InvalidQuota(f"gpus must be 0 or more; got {self.gpus}")
        if self.borrow_limit is not None and self.borrow_limit < 0:
            raise InvalidQuota(f"borrow_limit must be 0 or more; got {self.borrow_limit}")
        for glob, count in self.flavors.items():
            if not glob.strip():
                raise InvalidQuota("a flavor must be a gpu_name glob such as '*A100*'")
            if count < 0:
                raise InvalidQuota(f"flavor {glob!r} must have 0 or more GPUs; got {count}")
        # Sorted once: which flavor a GPU falls in must not depend on insertion order.
        object.__setattr__(self, "flavors", dict(sorted(self.flavors.items())))

    @property
    def has_quota(self) -> bool:
        return self.gpus is not None or bool(self.flavors)

    @property
    def is_default(self) -> bool:
        return self == TeamQuota()

    def flavor_of(self, gpu_name: str | None) -> str | None:
        """The team's flavor glob a GPU of this name counts against; None: none."""
        for glob in self.flavors:
            if gpu_name_matches(gpu_name, glob.lower()):
                return glob
        return None


NO_QUOTA = TeamQuota()

# A team's GPUs held now, per flavor glob of its own (None: outside its flavors).
FlavorUse = Mapping[str | None, int]


def within_quota(quota: TeamQuota, use: FlavorUse) -> int:
    """How many of the GPUs in ``use`` the quota covers (the rest are borrowed)."""
    total = sum(use.values())
    if not quota.flavors:
        return min(quota.gpus, total) if quota.gpus is not None else 0
    covered = sum(min(use.get(glob, 0), count) for glob, count in quota.flavors.items())
    if quota.gpus is None:
        return covered
    return min(quota.gpus, covered + use.get(None, 0))


def borrowed(quota: TeamQuota, use: FlavorUse) -> int:
    return sum(use.values()) - within_quota(quota, use)


class Verdict(Enum):
    WITHIN = "within"  # every GPU it takes is covered by the team's quota
    BORROW = "borrow"  # it borrows idle GPUs, within the borrowing limit
    CAPPED = "capped"  # it would take the team past quota + borrowing limit


def verdict(quota: TeamQuota, use: FlavorUse, flavor: str | None, gpus: int) -> Verdict:
    """What placing a job of ``gpus`` GPUs of ``flavor`` (the team's glob) would be."""
    if not quota.flavors:  # the usual shape, and a pass asks it per job: no copies
        held = sum(use.values())
        room = max(0, quota.gpus - held) if quota.gpus is not None else 0
        extra = max(0, gpus - room)  # borrowed beyond what is borrowed already
        if extra == 0:
            return Verdict.WITHIN
        lent = held - min(quota.gpus, held) if quota.gpus is not None else held
        if quota.borrow_limit is not None and lent + extra > quota.borrow_limit:
            return Verdict.CAPPED
        return Verdict.BORROW
    before = borrowed(quota, use)
    after_use = dict(use)
    after_use[flavor] = after_use.get(flavor, 0) + gpus
    after = borrowed(quota, after_use)
    if after == before:
        return Verdict.WITHIN
    if quota.borrow_limit is not None and after > quota.borrow_limit:
        return Verdict.CAPPED
    return Verdict.BORROW


# --- fair-share standing ----------------------------------------------------------------


def decayed_gpu_seconds(
    gpus: int, start: float, end: float, now: float, half_life_s: float
) -> float:
    """g x integral over [start, end] of 2^-((now-u)/h) du: GPU-seconds, each worth half
    as much for every half-life since it was spent (usage.py counts the same GPU-time
    undecayed)."""
    if gpus <= 0 or end <= start:
        return 0.0
    k = math.log(2) / half_life_s
    # expm1: exact for short spans and long half-lives, where a difference of two
    # exponentials would cancel out.
    return gpus * math.exp(-k * max(0.0, now - end)) * -math.expm1(-k * (end - start)) / k


@dataclass(frozen=True, slots=True)
class Holding:
    """A job holding a worker now, as fair share sees it."""

    job_id: str
    team: str | None
    gpus: int
    since: float  # the attempt's dispatch
    worker_id: str = ""


class UsageLedger:
    """Each team's decayed GPU-seconds, derived from attempts: the ended ones folded into
    one sum per team (decayed lazily, when next touched), the ones holding GPUs now counted
    from their dispatch when asked. Built from the stored attempts at start and told which
    jobs hold GPUs at each pass (and of each dispatch, and each worker freed, as they
    happen): a job that no longer holds one ended its attempt then."""

    def __init__(self, half_life_s: float = DEFAULT_HALF_LIFE_S) -> None:
        if half_life_s <= 0:
            raise InvalidQuota(f"the fair-share half-life must be above 0; got {half_life_s}")
        self.half_life_s = half_life_s
        self._ended: dict[str | None, tuple[float, float]] = {}  # team -> (value, as of)
        self._holding: dict[str, Holding] = {}
        self._on_worker: dict[str, str] = {}  # worker id -> the job holding it

    def add_ended(self, team: str | None, gpus: int, start: float, end: float) -> None:
        value = decayed_gpu_seconds(gpus, start, end, end, self.half_life_s)
        if value <= 0:
            return
        old, at = self._ended.get(team, (0.0, end))
        if end >= at:
            self._ended[team] = (self._decay(old, end - at) + value, end)
        else:  # an attempt read late (start-up): decay it to the sum's time instead
            self._ended[team] = (old + self._decay(value, at - end), at)

    def observe(self, holding: Iterable[Holding], now: float) -> None:
        """The jobs holding GPUs now; those held before and not now ended at ``now``.
        A job seen holding before keeps the start it was first seen with."""
        current = {h.job_id: self._holding.get(h.job_id, h) for h in holding}
        for job_id, gone in self._holding.items():
            if job_id not in current:
                self.add_ended(gone.team, gone.gpus, gone.since, now)
        self._holding = current
        self._on_worker = {h.worker_id: h.job_id for h in current.values() if h.worker_id}

    def hold(self, holding: Holding) -> None:
        """A job given a worker now (before its actor says so)."""
        if holding.job_id not in self._holding:
            self._holding[holding.job_id] = holding
            self._on_worker[holding.worker_id] = holding.job_id

    def release_worker(self, worker_id: str, now: float) -> None:
        """The worker is free (or gone): the attempt that held it ended now."""
        held = self._holding.pop(self._on_worker.pop(worker_id, ""), None)
        if held is not None:
            self.add_ended(held.team, held.gpus, held.since, now)

    def decayed(self, now: float) -> dict[str | None, float]:
        """Decayed GPU-seconds per team at ``now``, ended and holding attempts together."""
        totals = {team: self._decay(v, now - at) for team, (v, at) in self._ended.items()}
        for h in self._holding.values():
            running = decayed_gpu_seconds(h.gpus, h.since, now, now, self.half_life_s)
            totals[h.team] = totals.get(h.team, 0.0) + running
        return totals

    def _decay(self, value: float, elapsed: float) -> float:
        return value * 2.0 ** (-max(0.0, elapsed) / self.half_life_s)


def standings(
    decayed: Mapping[str | None, float], quotas: Mapping[str, TeamQuota]
) -> dict[str | None, float]:
    """Standing = decayed GPU-seconds / weight (lower goes first)."""
    return {
        team: value / (quotas.get(team, NO_QUOTA).weight if team is not None else 1.0)
        for team, value in decayed.items()
    }


# --- who holds what -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding a worker, as reclaim sees it."""

    job_id: str
    team: str | None
    priority: int
    gpus: int
    worker_id: str
    gpu_name: str | None  # the worker's
    since: float  # its attempt's dispatch


class QuotaBook:
    """Each team's GPUs held per flavor, and its quota: asked per job in a pass, told of
    each placement so later jobs of the team see it counted."""

    __slots__ = ("quotas", "use")

    def __init__(self, quotas: Mapping[str, TeamQuota]) -> None:
        self.quotas = quotas
        self.use: dict[str | None, dict[str | None, int]] = {}

    def quota(self, team: str | None) -> TeamQuota:
        return self.quotas.get(team, NO_QUOTA) if team is not None else NO_QUOTA

    def add(self, team: str | None, gpu_name: str | None, gpus: int) -> None:
        flavor = self.quota(team).flavor_of(gpu_name)
        by_flavor = self.use.setdefault(team, {})
        by_flavor[flavor] = by_flavor.get(flavor, 0) + gpus

    def verdict(self, team: str | None, gpu_name: str | None, gpus: int) -> Verdict:
        quota = self.quota(team)
        return verdict(quota, self.use.get(team, {}), quota.flavor_of(gpu_name), gpus)

    def used(self, team: str | None) -> int:
        return sum(self.use.get(team, {}).values())

    def borrowed(self, team: str | None) -> int:
        return borrowed(self.quota(team), self.use.get(team, {}))


def book_of(quotas: Mapping[str, TeamQuota], running: Iterable[RunningJob]) -> QuotaBook:
    book = QuotaBook(quotas)
    for job in running:
        book.add(job.team, job.gpu_name, job.gpus)
    return book


def borrowing_jobs(quotas: Mapping[str, TeamQuota], running: Iterable[RunningJob]) -> set[str]:
    """The jobs that hold borrowed GPUs: per team, in the order they started (oldest
    first), each job whose GPUs the quota no longer covers once the older ones count."""
    book = QuotaBook(quotas)
    found: set[str] = set()
    for job in sorted(running, key=lambda j: (j.since, j.job_id)):
        if job.gpus > 0 and book.verdict(job.team, job.gpu_name, job.gpus) is not Verdict.WITHIN:
            found.add(job.job_id)
        book.add(job.team, job.gpu_name, job.gpus)
    return found


# --- reclaim ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReclaimRules:
    min_runtime_s: float = DEFAULT_MIN_RUNTIME_S
    # Off by default: a team's higher-priority job may preempt its own lower ones.
    priority_preemption: bool = False


@dataclass(frozen=True, slots=True)
class Reclaim:
    """A decision: preempt ``victim`` (on ``worker_id``) so that ``job_id`` can run."""

    job_id: str
    team: str | None
    victim: str
    victim_team: str | None
    worker_id: str
    why: str


def protected(
    job: RunningJob, now: float, last_preempted: Mapping[str, float], rules: ReclaimRules
) -> bool:
    """Too young to preempt, or preempted within the protection window."""
    if now - job.since < rules.min_runtime_s:
        return True
    at = last_preempted.get(job.job_id)
    return at is not None and now - at < rules.min_runtime_s


def choose_victim(
    team: str | None,
    priority: int,
    gpus: int,
    fits: Mapping[str, bool],
    running: Iterable[RunningJob],
    book: QuotaBook,
    borrowers: set[str],
    now: float,
    last_preempted: Mapping[str, float],
    rules: ReclaimRules,
) -> RunningJob | None:
    """The job to preempt so that a pending job of ``team`` runs, or None.

    Only another team's borrowing job on a worker the pending job fits (``fits``: worker
    id -> does the job fit it when free), where the pending job would be within its own
    team's quota: lowest priority first, then youngest, then the fewest GPUs. With
    ``priority_preemption``, a lower-priority job of the same team qualifies too."""
    candidates = []
    for job in running:
        if not fits.get(job.worker_id, False) or protected(job, now, last_preempted, rules):
            continue
        if job.team != team:
            if job.job_id not in borrowers:
                continue
            if book.verdict(team, job.gpu_name, gpus) is not Verdict.WITHIN:
                continue
        elif team is None or not (rules.priority_preemption and job.priority < priority):
            continue  # within a team only: jobs of no team never preempt each other
        candidates.append(job)
    if not candidates:
        return None
    return min(candidates, key=lambda j: (j.priority, -j.since, j.gpus, j.job_id))


def reclaim_reason(victim: RunningJob, team: str | None, borrowing: bool) -> str:
    if borrowing:
        return (
            f"team {victim.team} borrows worker {victim.worker_id}; team {team} is below "
            "its quota and needs it"
        )
    return f"a higher-priority job of team {team} needs worker {victim.worker_id}"


# --- what the wait reason says --------------------------------------------------------


def flavor_label(glob: str | None) -> str:
    """'*A100*' -> 'A100'; None -> 'GPUs'."""
    if glob is None:
        return "GPUs"
    return glob.strip("*?") or glob


def quota_hold_reason(book: QuotaBook, team: str | None, gpu_name: str | None) -> str | None:
    """Why a job of ``team`` (asking for ``gpu_name``, a glob or None) waits on quotas,
    once no idle worker took it: the team is at its quota for that flavor (nothing idle to
    borrow) or at quota + borrowing limit. None when its team is below its quota."""
    if team is None:
        return None
    quota = book.quota(team)
    if not quota.has_quota:
        return None
    use = book.use.get(team, {})
    lent = borrowed(quota, use)
    if quota.borrow_limit is not None and lent >= quota.borrow_limit and lent > 0:
        return (
            f"team {team} borrows {lent} of its {quota.borrow_limit} borrowable GPUs "
            "(borrow_limit) on top of its quota"
        )
    glob = None
    if gpu_name and quota.flavors:
        wanted = gpu_name.lower()
        glob = next((g for g in quota.flavors if g.lower() == wanted), None)
    if glob is not None:
        held, nominal = use.get(glob, 0), quota.flavors[glob]
    elif quota.gpus is not None:
        held, nominal = sum(use.values()), quota.gpus
    else:
        return None
    if held < nominal:
        return None
    label = flavor_label(glob)
    if quota.borrow_limit == 0:
        return f"team {team} uses {held} of its {nominal} {label} (quota) and may not borrow"
    return f"team {team} uses {held} of its {nominal} {label} (quota); no idle {label} to borrow"


def quota_view(quota: TeamQuota) -> dict[str, Any]:
    """A quota as the API shows it (and takes it: POST .../quota)."""
    return {
        "gpus": quota.gpus,
        "flavors": dict(quota.flavors),
        "weight": quota.weight,
        "borrow_limit": quota.borrow_limit,
    }


def quota_warnings(
    team: str,
    quota: TeamQuota,
    quotas: Mapping[str, TeamQuota],
    fleet: Iterable[tuple[str | None, int]],
) -> list[str]:
    """What an admin should know about a quota that is accepted anyway: a flavor no
    worker's GPU matches now (it applies once one joins), and quotas adding up past the
    fleet's GPUs (oversubscription: not every team can have its quota at once).
    ``fleet`` is (GPU name, GPU count) per worker known now."""
    workers = list(fleet)
    warnings = []
    names = sorted({name for name, _ in workers if name})
    for glob in quota.flavors:
        if not any(gpu_name_matches(name, glob.lower()) for name, _ in workers):
            have = ", ".join(names) if names else "none"
            warnings.append(
                f"flavor {glob!r} matches no worker's GPU now (workers have: {have}); "
                "the quota is kept and applies once such a worker joins"
            )
    total = sum(count for _, count in workers)
    nominal = sum(_nominal(q) for q in {**quotas, team: quota}.values())
    if nominal > total:
        warnings.append(
            f"team quotas add up to {nominal} GPUs but the fleet has {total} now "
            "(oversubscribed): not every team can reach its quota at once"
        )
    return warnings


def _nominal(quota: TeamQuota) -> int:
    flavored = sum(quota.flavors.values())
    return quota.gpus if quota.gpus is not None else flavored
