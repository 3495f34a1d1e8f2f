"""What every orchestrator actor shares: settings, clock, storage, and each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tunefleet.actors.fair_share_state import FairShareSettings
from tunefleet.actors.quarantine_policy import QuarantineRule
from tunefleet.fsm.job import DEFAULT_INFRA_RETRIES
from tunefleet.limits import Limits

if TYPE_CHECKING:
    from tunefleet.actors.clock import Clock
    from tunefleet.actors.events import EventHub
    from tunefleet.actors.job_actor import JobActor
    from tunefleet.actors.local_isolation import LocalIsolation
    from tunefleet.actors.persistence import Persistence
    from tunefleet.actors.runtime import ActorSystem
    from tunefleet.actors.scheduler import Scheduler
    from tunefleet.actors.supervisor import Supervisor
    from tunefleet.actors.worker_actor import WorkerActor
    from tunefleet.artifacts.service import Artifacts
    from tunefleet.audit import AuditLog
    from tunefleet.metrics import Metrics


@dataclass(frozen=True, slots=True)
class FleetSettings:
    heartbeat_timeout_s: float = 120.0
    health_check_interval_s: float = 60.0
    dispatch_ack_timeout_s: float = 60.0
    # How long a worker whose stream closed keeps a job it has not acknowledged, waiting
    # for its agent to reconnect, before the job goes back to the queue.
    reconnect_grace_s: float = 5.0
    cancel_grace_s: float = 60.0
    # A preempted trainer's time to write a checkpoint and exit after SIGTERM, and what
    # the orchestrator waits on top of it (the agent stores the checkpoint, then reports)
    # before it requeues the job without the agent's word.
    preempt_grace_s: float = 120.0
    preempt_slack_s: float = 60.0
    never_connected_timeout_s: float = 600.0
    ephemeral_retention_s: float = 3600.0
    default_max_retries: int = 3
    # Infrastructure failures a job is retried after, apart from its max_retries.
    infra_retries: int = DEFAULT_INFRA_RETRIES
    # When a worker is quarantined automatically (actors/quarantine_policy.py).
    quarantine: QuarantineRule = field(default_factory=QuarantineRule)
    ping_interval_s: float = 15.0
    # How long a worker stays unschedulable after its final report, if the response
    # to that report is never confirmed written (see ReportWritten).
    report_hold_s: float = 2.0
    local_runner: bool = True
    # Why the local runner did not start although asked for (no isolation to be had).
    local_runner_off: str | None = None
    # How the local runner runs whose jobs (None: fleets built without one, in tests).
    local_isolation: LocalIsolation | None = None
    # `/api/artifacts`: where workers store outputs (job_submit's upload_endpoint). A path,
    # because SimpleTuner's agent puts its orchestrator URL in front of it; empty only in
    # fleets built without an artifact store (unit tests).
    upload_endpoint: str = ""
    # The bounds on what clients can grow (tunefleet/limits.py): log bytes per attempt and
    # the job's progress are enforced by the actors.
    limits: Limits = field(default_factory=Limits)
    # Team quotas' standing half-life and reclaim's protection (fair_share_state.py).
    fair_share: FairShareSettings = field(default_factory=FairShareSettings)


@dataclass(slots=True)
class FleetContext:
    settings: FleetSettings
    clock: Clock
    system: ActorSystem
    persistence: Persistence
    audit: AuditLog
    hub: EventHub
    metrics: Metrics
    scheduler: Scheduler = field(init=False)
    supervisor: Supervisor = field(init=False)
    workers: dict[str, WorkerActor] = field(default_factory=dict)
    jobs: dict[str, JobActor] = field(default_factory=dict)
    artifacts: Artifacts | None = None
