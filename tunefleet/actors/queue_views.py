"""What the queue looks like per person and team, read from the live job actors: the
counts behind `GET /api/queue/stats`' by_user and by_team and `GET /api/queue/me`.

Only jobs not yet ended have an actor, which is exactly what these views count; no
database read, so a stats call costs one walk over the live jobs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tunefleet.actors.context import FleetContext
from tunefleet.actors.tenancy_limits import ConcurrencyLimits
from tunefleet.fsm.job import JobState

# Set by the approval work where it exists (fsm/job.py); until then no job awaits one.
AWAITING_APPROVAL: str | None = getattr(JobState, "PENDING_APPROVAL", None)
_HOLDING = (JobState.DISPATCHED, JobState.RUNNING)


@dataclass(frozen=True, slots=True)
class LiveJob:
    job_id: str
    name: str | None
    state: str
    priority: int
    gpu_count: int
    user: str | None
    team: str | None


def live_jobs(ctx: FleetContext) -> list[LiveJob]:
    return [
        LiveJob(
            job.job_id,
            job.rec.name,
            str(job.state),
            job.rec.priority,
            job.rec.gpu_count,
            job.rec.user_name,
            job.rec.team_name,
        )
        for job in list(ctx.jobs.values())
    ]


# The wire keys of a count: the states' own names (running: holding a worker).
_PENDING, _RUNNING = str(JobState.PENDING), str(JobState.RUNNING)


def _bucket() -> dict[str, int]:
    return {_PENDING: 0, _RUNNING: 0, "gpus": 0}


def counts_by(jobs: Iterable[LiveJob], key: str) -> dict[str, dict[str, int]]:
    """Per user (key "user") or team: pending jobs, jobs holding a worker, their GPUs."""
    counts: dict[str, dict[str, int]] = {}
    for job in jobs:
        owner = getattr(job, key)
        if owner is None:
            continue
        bucket = counts.setdefault(owner, _bucket())
        if job.state == JobState.PENDING:
            bucket[_PENDING] += 1
        elif job.state in _HOLDING:
            bucket[_RUNNING] += 1
            bucket["gpus"] += job.gpu_count
    return counts


def limits_view(limits: ConcurrencyLimits) -> dict[str, Any]:
    return {
        "max_concurrent": limits.max_concurrent,
        "user_max_concurrent": limits.user_max_concurrent,
        "teams": {
            name: {"max_jobs": team.max_jobs, "max_gpus": team.max_gpus}
            for name, team in sorted(limits.teams.items())
        },
    }


def job_line(job: LiveJob) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "name": job.name,
        "status": job.state,
        "priority": job.priority,
        "gpu_count": job.gpu_count,
        "team": job.team,
    }
