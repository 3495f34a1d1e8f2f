"""The outbox's writer: called on the DB thread, INSIDE the transaction of the change an
event describes, so the event is stored exactly when its change is (a rolled-back change
leaves no event; a committed one always has its event, whatever happens next).

The subscriptions are kept in memory (they change only through this orchestrator's API,
which calls ``reload``): with none, staging an event is one attribute test and nothing
is read or written, so the dispatch path costs what it did before webhooks existed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import peewee as pw
import structlog

from tunefleet.fsm import JobState, WorkerState
from tunefleet.storage.store import Repos
from tunefleet.storage.store_webhooks import WebhookSubscriptionRow, new_event_id
from tunefleet.webhooks.events import (
    EVENT_KINDS,
    FINISHED_JOB_EVENTS,
    JobFacts,
    Scope,
    WorkerFacts,
    envelope,
    job_body,
    matches,
    worker_body,
)

log = structlog.get_logger(__name__)


def _numeric(values: Mapping[str, Any] | None) -> dict[str, float]:
    if not values:
        return {}
    return {
        str(k): float(v)
        for k, v in values.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and k != "step"
    }


class WebhookOutbox:
    def __init__(self, base_url: str = "", now: Callable[[], float] = time.time) -> None:
        """``now`` stamps events (the sender's clock: an event is due at once)."""
        self.base_url = base_url.rstrip("/")
        self.now = now
        self._live: tuple[WebhookSubscriptionRow, ...] = ()
        self._staged = threading.Event()
        self._wake: Callable[[], None] | None = None

    # --- on the event loop --------------------------------------------------------------

    def reload(self, subscriptions: Iterable[WebhookSubscriptionRow]) -> None:
        """The subscriptions now stored (after any change to them)."""
        self._live = tuple(s for s in subscriptions if s.disabled_at is None)

    @property
    def active(self) -> bool:
        return bool(self._live)

    @property
    def count(self) -> int:
        """Enabled subscriptions."""
        return len(self._live)

    def on_staged(self, wake: Callable[[], None]) -> None:
        """``wake()`` runs on the DB thread after a commit that stored events."""
        self._wake = wake

    def committed(self) -> None:
        """A commit listener (DB thread): wake the sender if events were staged."""
        if self._staged.is_set():
            self._staged.clear()
            if self._wake is not None:
                self._wake()

    # --- on the DB thread, inside a transaction ------------------------------------------

    def stage_job(
        self,
        repos: Repos,
        kind: str,
        job_id: str,
        *,
        detail: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
    ) -> None:
        if not self._live:
            return
        job = repos.webhooks.job_facts(job_id)
        if job is None:
            return
        final = _numeric(metrics) or _numeric(job["progress"])
        finished = kind in FINISHED_JOB_EVENTS
        checkpoints = len(repos.artifacts.checkpoints(job_id)) if finished else 0
        labels = dict(job["worker_labels"] or {})
        facts = JobFacts(
            job_id=job["id"],
            name=job["name"] or job["config_name"],
            state=job["state"],
            user_name=job["user_name"],
            team_name=job["team_name"],
            worker_id=job["worker_id"],
            worker_name=job["worker_name"],
            worker_labels=labels,
            attempt=job["attempts"],
            submitted_at=job["submitted_at"],
            started_at=job["started_at"],
            finished_at=job["finished_at"],
            error=job["error"],
            metrics=final,
            checkpoints=checkpoints,
        )
        scope = Scope(facts.user_name, facts.team_name, labels)
        body = job_body(kind, facts, self.base_url, detail or {})
        self._stage(repos, kind, body, scope)

    def stage_worker(
        self, repos: Repos, kind: str, worker_id: str, *, reason: str | None = None
    ) -> None:
        if not self._live:
            return
        row = repos.webhooks.worker_facts(worker_id)
        if row is None:
            return
        facts = WorkerFacts(
            row["id"],
            row["name"],
            row["state"],
            dict(row["labels"] or {}),
            row["gpu_count"],
            row["gpu_name"],
            reason,
        )
        scope = Scope(worker_labels=facts.labels)
        self._stage(repos, kind, worker_body(facts, self.base_url), scope)

    def stage_plain(
        self, repos: Repos, kind: str, data: Mapping[str, Any], scope: Scope | None = None
    ) -> None:
        """An event about no job or worker (a budget, a takeover)."""
        if not self._live:
            return
        self._stage(repos, kind, data, scope or Scope())

    def stage_test(self, repos: Repos, subscription_id: int, data: Mapping[str, Any]) -> str:
        """A ``webhook.test`` event for one subscription (enabled or not); its event id."""
        event_id, at = new_event_id(), self.now()
        body = envelope("webhook.test", event_id, at, data, self.base_url)
        repos.webhooks.add_event("webhook.test", body, [subscription_id], event_id=event_id, at=at)
        self._staged.set()
        return event_id

    def _stage(self, repos: Repos, kind: str, data: Mapping[str, Any], scope: Scope) -> None:
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown webhook event kind {kind}")
        try:
            self._store_event(repos, kind, data, scope)
        except pw.DatabaseError:
            raise  # the transaction is failing anyway: the change and its event go together
        except Exception:
            # A fault of ours must never cost a job its step; the event is what is lost.
            log.exception("webhooks.stage_failed", kind=kind)

    def _store_event(self, repos: Repos, kind: str, data: Mapping[str, Any], scope: Scope) -> None:
        wanted = [
            sub.id
            for sub in self._live
            if matches(
                frozenset(sub.events),
                Scope(sub.user_name, sub.team_name, sub.worker_labels),
                sub.owner,
                kind,
                scope,
            )
        ]
        if not wanted:
            return
        event_id, at = new_event_id(), self.now()
        body = envelope(kind, event_id, at, data, self.base_url)
        repos.webhooks.add_event(kind, body, wanted, event_id=event_id, at=at)
        self._staged.set()

    # --- the events of an audited step -------------------------------------------------

    def stage_audited(
        self, repos: Repos, kind: str, target: str | None, metrics: Mapping[str, Any] | None
    ) -> None:
        """The webhook events of a job step, told by its audit event's kind: every job
        step the actors commit goes through Persistence._audited, so this is the one
        place they are found (a new step with a known audit kind needs no wiring)."""
        if not self._live or target is None:
            return
        for event in job_events_of(kind, repos, target):
            self.stage_job(repos, event, target, metrics=metrics)


# A rejected approval ends the job cancelled with this error (actors/approvals.py).
REJECTED_PREFIX = "rejected by "
PREEMPTED_OUTCOME = "preempted"


def job_events_of(audit_kind: str, repos: Repos, job_id: str) -> list[str]:
    """The webhook events an audited job step makes (read in its transaction)."""
    if audit_kind == "job.submitted":
        job = repos.webhooks.job_facts(job_id)
        held = job is not None and job["state"] == JobState.PENDING_APPROVAL
        return ["job.submitted", "approval.required"] if held else ["job.submitted"]
    if audit_kind == "job.approved":
        return ["approval.granted"]
    if audit_kind == "job.preempted":
        return ["job.preempted"]
    if audit_kind == "job.requeued":
        # The generic end of an attempt that puts the job back: its outcome tells a
        # preemption (issue 25's outcome) from a retry after a lost attempt.
        attempts = repos.jobs.attempts(job_id)
        last = attempts[-1] if attempts else None
        preempted = last is not None and last.outcome == PREEMPTED_OUTCOME
        return ["job.preempted"] if preempted else ["job.retried"]
    if audit_kind == "job.cancelled":
        job = repos.webhooks.job_facts(job_id)
        rejected = job is not None and (job["error"] or "").startswith(REJECTED_PREFIX)
        return ["approval.rejected", "job.cancelled"] if rejected else ["job.cancelled"]
    if audit_kind in ("job.completed", "job.failed"):
        return [audit_kind]
    return []


_ONLINE_STATES = frozenset({WorkerState.IDLE, WorkerState.BUSY, WorkerState.DRAINING})
_AWAY_STATES = frozenset({WorkerState.OFFLINE, WorkerState.CONNECTING})


def worker_event_of(expected: str | Collection[str], state: str) -> str | None:
    """``worker.online`` when a worker comes back (from offline or never connected),
    ``worker.offline`` when it goes; None for moves between its working states."""
    before = {expected} if isinstance(expected, str) else {str(e) for e in expected}
    if state == WorkerState.OFFLINE and not before <= {WorkerState.OFFLINE}:
        return "worker.offline"
    if state in _ONLINE_STATES and before <= _AWAY_STATES:
        return "worker.online"
    return None
