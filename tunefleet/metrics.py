"""The orchestrator's own Prometheus metrics (not the jobs' training metrics: those are
``metric_table.py`` and ``storage/store_metrics.py``).

A room of its own, outside http/, so the actors count dispatches, requeues and
heartbeats without knowing aiohttp; http/ only serves ``GET /metrics`` and times
requests (``http/metrics.py``). Each ``Metrics`` owns its own ``CollectorRegistry``
(never the process-global one), so a test process can build several fleets side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tunefleet.fsm.worker import WorkerState

NAMESPACE = "tunefleet"
# Dispatch is an in-memory hand-off plus one database write: most land in the
# sub-10 ms buckets; the long tail (a slow disk, a busy database) up to 10 s.
DISPATCH_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075,
    0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
HTTP_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
_WORKER_STATES = frozenset(state.value for state in WorkerState)


class Metrics:
    """Every metric the orchestrator exports, on a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.workers_by_state = Gauge(
            "workers", "Known workers by state.", ["state"], namespace=NAMESPACE, registry=r
        )
        self.queue_depth = Gauge(
            "queue_depth", "Jobs waiting for a worker (pending).", namespace=NAMESPACE, registry=r
        )
        self.jobs_running = Gauge(
            "jobs_running",
            "Jobs dispatched or running on a worker.",
            namespace=NAMESPACE,
            registry=r,
        )
        self.dispatch_latency = Histogram(
            "dispatch_latency_seconds",
            "Time from a job becoming pending (submitted or requeued) to its dispatch.",
            buckets=DISPATCH_BUCKETS_S,
            namespace=NAMESPACE,
            registry=r,
        )
        self.heartbeats = Counter(
            "heartbeats", "Heartbeats received from workers.", namespace=NAMESPACE, registry=r
        )
        self.redeliveries = Counter(
            "dispatch_redeliveries",
            "job_submits pushed again because the agent's heartbeat showed it had dropped "
            "one (SimpleTuner's agent drops a job that races its completion report).",
            namespace=NAMESPACE,
            registry=r,
        )
        self.health_changes = Counter(
            "worker_health_changes",
            "Workers whose GPU health moved to a level (one turning unhealthy is quarantined).",
            ["health"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.requeues = Counter(
            "job_requeues",
            "Jobs put back in the queue, by reason.",
            ["reason"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.attempt_failures = Counter(
            "attempt_failures",
            "Attempts that ended without completing, by kind (job_error, infrastructure, "
            "worker_shutdown, timeout, cancelled, preempted, undelivered).",
            ["kind"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.quarantines = Counter(
            "worker_quarantines",
            "Workers quarantined, by how (automatic: failures there or an unhealthy GPU "
            "reading; manual).",
            ["how"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.workers_quarantined = Gauge(
            "workers_quarantined",
            "Workers quarantined now (taking no new job); set when /metrics is read.",
            namespace=NAMESPACE,
            registry=r,
        )
        self.preemptions = Counter(
            "preemptions",
            "Attempts ended preempted (requeued, no retry spent), by the job's team.",
            ["team"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.reclaims = Counter(
            "reclaims",
            "Jobs the scheduler chose to preempt, by the victim's team: to reclaim GPUs it "
            "borrowed for a team below its quota, or (priority preemption) for a "
            "higher-priority job of its own team.",
            ["team"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.jobs_finished = Counter(
            "jobs_finished",
            "Jobs that reached a terminal state, by outcome.",
            ["outcome"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.registrations = Counter(
            "worker_registrations",
            "Worker registration attempts, by outcome.",
            ["outcome"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.auth_failures = Counter(
            "auth_failures",
            "Rejected credentials, by kind (worker_token, api_token, permission).",
            ["kind"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.connections_refused = Counter(
            "connections_refused",
            "Connections closed unserved: past the per-address cap (address_cap), or "
            "without a request's headers in time (header_timeout).",
            ["reason"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.accept_errors = Counter(
            "accept_errors",
            "Failed accepts of a new connection (out of file descriptors or memory).",
            namespace=NAMESPACE,
            registry=r,
        )
        self.http_request_duration = Histogram(
            "http_request_duration_seconds",
            "HTTP request handling time by method, route template and status.",
            ["method", "route", "status"],
            buckets=HTTP_BUCKETS_S,
            namespace=NAMESPACE,
            registry=r,
        )
        # One child per (method, route, status) seen: labels() validates and locks on every
        # call, which was a third of the timing middleware's cost. Bounded, as the labels are.
        self._http_children: dict[tuple[str, str, int], Any] = {}
        self._finished_children: dict[str, Any] = {}  # the same, one per job outcome
        self.set_worker_counts({})

    def observe_http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """One request in ``http_request_duration_seconds``; ``method`` and ``route`` are
        already bounded label values (see ``http/metrics.py``)."""
        key = (method, route, status)
        child = self._http_children.get(key)
        if child is None:
            child = self.http_request_duration.labels(
                method=method, route=route, status=str(status)
            )
            self._http_children[key] = child
        child.observe(seconds)

    def job_finished(self, outcome: str) -> None:
        """One job in ``jobs_finished`` under ``outcome`` (a terminal state)."""
        child = self._finished_children.get(outcome)
        if child is None:
            child = self._finished_children[outcome] = self.jobs_finished.labels(outcome=outcome)
        child.inc()

    def set_worker_counts(self, counts: Mapping[str, int]) -> None:
        """Set the per-state gauge from a full count; states not in ``counts`` are 0,
        so every state is always exported (absent series break rate/alert queries)."""
        for state in WorkerState:
            self.workers_by_state.labels(state=state.value).set(counts.get(state.value, 0))
        for name, count in counts.items():
            if name not in _WORKER_STATES:
                self.workers_by_state.labels(state=name).set(count)

    def render(self) -> tuple[bytes, str]:
        """The exposition body and its Content-Type. Pass the type as a header
        (``headers={"Content-Type": ...}``): aiohttp's ``content_type=`` argument
        refuses a value with parameters."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
