"""The events a subscription may ask for, and each one's body: pure functions over the
plain facts the outbox reads in the transaction that makes the change."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tunefleet.actors.records import iso

JOB_EVENTS: Final = (
    "job.submitted",
    "job.started",
    "job.completed",
    "job.failed",
    "job.cancelled",
    "job.retried",
    "job.preempted",
)
APPROVAL_EVENTS: Final = ("approval.required", "approval.granted", "approval.rejected")
WORKER_EVENTS: Final = ("worker.online", "worker.offline", "worker.quarantined")
BUDGET_EVENTS: Final = ("budget.warning", "budget.exceeded")
TAKEOVER: Final = "orchestrator.takeover"
ORCHESTRATOR_EVENTS: Final = (TAKEOVER,)
# Sent only by `tunefleet webhooks test`, to the one subscription tested.
TEST_EVENT: Final = "webhook.test"
EVENT_KINDS: Final = (
    JOB_EVENTS + APPROVAL_EVENTS + WORKER_EVENTS + BUDGET_EVENTS + ORCHESTRATOR_EVENTS
)
# What a user who is not an admin may subscribe to: events about jobs they may see.
USER_EVENT_KINDS: Final = JOB_EVENTS + APPROVAL_EVENTS + BUDGET_EVENTS
FINISHED_JOB_EVENTS: Final = frozenset({"job.completed", "job.failed", "job.cancelled"})


@dataclass(frozen=True, slots=True)
class JobFacts:
    job_id: str
    name: str | None
    state: str
    user_name: str | None
    team_name: str | None
    worker_id: str | None
    worker_name: str | None
    worker_labels: Mapping[str, str]
    attempt: int
    submitted_at: float | None
    started_at: float | None
    finished_at: float | None
    error: str | None
    metrics: Mapping[str, float] = field(default_factory=dict)
    checkpoints: int = 0


@dataclass(frozen=True, slots=True)
class WorkerFacts:
    worker_id: str
    name: str
    state: str
    labels: Mapping[str, str]
    gpu_count: int
    gpu_name: str | None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Scope:
    """What a subscription's filters look at: whose job, which worker."""

    user_name: str | None = None
    team_name: str | None = None
    worker_labels: Mapping[str, str] = field(default_factory=dict)


def job_body(kind: str, job: JobFacts, base_url: str, detail: Mapping[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "job_id": job.job_id,
        "name": job.name,
        "status": job.state,
        "user": job.user_name,
        "team": job.team_name,
        "attempt": job.attempt,
        "worker_id": job.worker_id,
        "worker_name": job.worker_name,
        "submitted_at": iso(job.submitted_at),
        "started_at": iso(job.started_at),
        "finished_at": iso(job.finished_at),
        "links": {
            "job": f"{base_url}/#/jobs/{job.job_id}",
            "artifacts": f"{base_url}/api/queue/{job.job_id}/artifacts",
            "api": f"{base_url}/api/queue/{job.job_id}",
        },
    }
    if kind in FINISHED_JOB_EVENTS:
        body["error"] = job.error
        body["final_metrics"] = dict(job.metrics)
        body["checkpoints"] = job.checkpoints
        if job.started_at is not None and job.finished_at is not None:
            body["duration_s"] = round(job.finished_at - job.started_at, 3)
    if detail:
        body["detail"] = dict(detail)
    return body


def worker_body(worker: WorkerFacts, base_url: str) -> dict[str, Any]:
    return {
        "worker_id": worker.worker_id,
        "name": worker.name,
        "status": worker.state,
        "labels": dict(worker.labels),
        "gpu_count": worker.gpu_count,
        "gpu_name": worker.gpu_name,
        "reason": worker.reason,
        "links": {"workers": f"{base_url}/#/workers"},
    }


def envelope(
    kind: str, event_id: str, at: float, data: Mapping[str, Any], orchestrator: str
) -> dict[str, Any]:
    """The JSON every ``json`` subscription receives: the same for all of them."""
    return {
        "id": event_id,
        "type": kind,
        "created_at": iso(at),
        "orchestrator": orchestrator,
        "data": dict(data),
    }


def matches(
    events: frozenset[str] | tuple[str, ...],
    filters: Scope,
    owner: str | None,
    kind: str,
    scope: Scope,
) -> bool:
    """Whether a subscription wants an event: its kind is asked for, every filter given
    holds, and a user's own subscription (``owner``) hears only of that user's own jobs
    (a narrowing of http/job_access.may_see: never a job the user may not see)."""
    if kind not in events:
        return False
    if filters.user_name is not None and scope.user_name != filters.user_name:
        return False
    if filters.team_name is not None and scope.team_name != filters.team_name:
        return False
    for key, value in filters.worker_labels.items():
        if scope.worker_labels.get(key) != value:
            return False
    return owner is None or scope.user_name == owner
