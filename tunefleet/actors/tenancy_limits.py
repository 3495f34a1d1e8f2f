"""Concurrency limits (issue 24): may a pending job start now, and if not, which limit
holds it, with the numbers.

Pure functions over plain values, in SimpleTuner's spelling: a global `max_concurrent`
(jobs running in the whole fleet), a per-user `user_max_concurrent`, and per team a
maximum of concurrent jobs and of concurrent GPUs. None or 0 means unlimited. What
counts as running is every job holding a worker (dispatched or running), so a job
given a worker in this pass counts at once (LimitGate.take).

Limits only ever hold jobs back from starting: lowering one never stops a running job,
it only holds the next ones until enough have ended.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TeamLimits:
    """One team's ceilings; None is unlimited."""

    max_jobs: int | None = None
    max_gpus: int | None = None


@dataclass(frozen=True, slots=True)
class ConcurrencyLimits:
    max_concurrent: int | None = None
    user_max_concurrent: int | None = None
    teams: Mapping[str, TeamLimits] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # 0 is SimpleTuner's "unlimited" too: one spelling inside, so checks are `is None`.
        object.__setattr__(self, "max_concurrent", self.max_concurrent or None)
        object.__setattr__(self, "user_max_concurrent", self.user_max_concurrent or None)
        teams = {
            name: TeamLimits(t.max_jobs or None, t.max_gpus or None)
            for name, t in self.teams.items()
        }
        object.__setattr__(self, "teams", {n: t for n, t in teams.items() if t != TeamLimits()})

    @property
    def unlimited(self) -> bool:
        """No limit set: the scheduler skips counting altogether (the fast path)."""
        return self.max_concurrent is None and self.user_max_concurrent is None and not self.teams

    def with_team(self, team: str, limits: TeamLimits) -> ConcurrencyLimits:
        return ConcurrencyLimits(
            self.max_concurrent, self.user_max_concurrent, {**self.teams, team: limits}
        )


@dataclass(frozen=True, slots=True)
class Holder:
    """Who a job belongs to and how many GPUs it holds (or would) while it runs."""

    user: str | None
    team: str | None
    gpus: int


@dataclass(slots=True)
class Usage:
    """What the running jobs hold: jobs in all, per user, and jobs and GPUs per team."""

    jobs: int = 0
    user_jobs: Counter[str] = field(default_factory=Counter)
    team_jobs: Counter[str] = field(default_factory=Counter)
    team_gpus: Counter[str] = field(default_factory=Counter)

    def add(self, job: Holder) -> None:
        self.jobs += 1
        if job.user is not None:
            self.user_jobs[job.user] += 1
        if job.team is not None:
            self.team_jobs[job.team] += 1
            self.team_gpus[job.team] += job.gpus


def usage_of(running: Iterable[Holder]) -> Usage:
    usage = Usage()
    for job in running:
        usage.add(job)
    return usage


def hold_reason(limits: ConcurrencyLimits, usage: Usage, job: Holder) -> str | None:
    """Why ``job`` may not start now, naming the limit and the numbers; None if it may."""
    if limits.max_concurrent is not None and usage.jobs >= limits.max_concurrent:
        return f"the fleet runs {usage.jobs} of its {limits.max_concurrent} jobs (max_concurrent)"
    if job.user is not None and limits.user_max_concurrent is not None:
        running = usage.user_jobs[job.user]
        if running >= limits.user_max_concurrent:
            return (
                f"user {job.user} runs {running} of their {limits.user_max_concurrent} jobs "
                "(user_max_concurrent)"
            )
    if job.team is None or (team := limits.teams.get(job.team)) is None:
        return None
    name = job.team
    if team.max_jobs is not None and usage.team_jobs[name] >= team.max_jobs:
        return f"team {name} runs {usage.team_jobs[name]} of its {team.max_jobs} jobs"
    if team.max_gpus is not None:
        used = usage.team_gpus[name]
        if job.gpus > team.max_gpus:
            return (
                f"team {name} may run at most {team.max_gpus} GPUs and this job needs "
                f"{job.gpus}; resubmit with fewer or ask an admin to raise the limit"
            )
        if used + job.gpus > team.max_gpus:
            needs = f"; this job needs {job.gpus}" if used < team.max_gpus else ""
            return f"team {name} runs {used} of its {team.max_gpus} GPUs{needs}"
    return None


class LimitGate:
    """A matching pass's view of the limits: asked per job in queue order, told of each
    job given a worker, so later jobs of the same user or team see it counted."""

    __slots__ = ("limits", "usage")

    def __init__(self, limits: ConcurrencyLimits, usage: Usage) -> None:
        self.limits = limits
        self.usage = usage

    def allows(self, job: Holder) -> bool:
        return hold_reason(self.limits, self.usage, job) is None

    def take(self, job: Holder) -> None:
        self.usage.add(job)


def team_limit_warning(team: str, limits: TeamLimits, fleet_gpus: int) -> str | None:
    """A team allowed more GPUs than the fleet has is accepted (workers may join), but
    said: its limit cannot be what holds it back."""
    if limits.max_gpus is not None and limits.max_gpus > fleet_gpus:
        return (
            f"team {team} may run {limits.max_gpus} GPUs but the fleet has {fleet_gpus} now; "
            "the limit is kept and will not hold it back until the fleet grows"
        )
    return None
