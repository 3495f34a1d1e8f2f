"""Messages between the orchestrator's actors: small frozen facts and commands."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tunefleet.actors.fair_share import TeamQuota
from tunefleet.actors.matching import PendingJob, WorkerView
from tunefleet.actors.tenancy_limits import ConcurrencyLimits
from tunefleet.gpu_health import HealthSample
from tunefleet.protocol.events import JobSubmitEvent

# --- to a WorkerActor -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Register:
    """The agent (re)registered. The reply is the protocol's register response."""

    name: str
    gpu: dict[str, Any]
    persistent: bool | None
    agent_labels: dict[str, str]
    current_job_id: str | None
    provider: str | None
    hostname: str | None
    client_address: str | None
    # The programs the agent will run (--allowed-commands); None: it did not say (any,
    # as far as the scheduler can know; SimpleTuner's agent never says).
    allowed_commands: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class OpenStream:
    """An SSE stream opened; the reply is the StreamConnection to read from."""

    last_event_id: int | None


@dataclass(frozen=True, slots=True)
class CloseStream:
    connection_id: int


@dataclass(frozen=True, slots=True)
class HeartbeatReceived:
    status: str | None
    current_job_id: str | None
    job_progress: dict[str, Any] | None
    gpu_utilization: list[float] | None
    vram_used_gb: list[float] | None
    # tunefleet's agent's GPU health reading (gpu_health.py); None: the agent sends none.
    gpu_health: HealthSample | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatExpired:
    """The worker's heartbeat deadline passed without a heartbeat (its own timer, or the
    supervisor's health check catching a missed one)."""


@dataclass(frozen=True, slots=True)
class Disconnected:
    """The agent said goodbye (POST /api/workers/disconnect)."""


@dataclass(frozen=True, slots=True)
class ReserveForJob:
    """The job actor asks for this worker; the reply is True when it may dispatch."""

    job_id: str


@dataclass(frozen=True, slots=True)
class CancelReservation:
    job_id: str


@dataclass(frozen=True, slots=True)
class PushJob:
    """The dispatch is committed: put job_submit on the stream."""

    job_id: str
    event: JobSubmitEvent


@dataclass(frozen=True, slots=True)
class PushCancel:
    job_id: str
    reason: str
    # A preemption: the agent's trainer has this long to write a checkpoint and exit.
    preempt_grace_s: float | None = None


@dataclass(frozen=True, slots=True)
class JobAcknowledged:
    job_id: str


@dataclass(frozen=True, slots=True)
class JobReleased:
    """The worker's job ended (or was taken away); it may go back to idle."""

    job_id: str
    hold_until_report_written: bool = False
    # A preempted attempt the agent has not reported on yet: no dispatch here until it
    # does (the hold then ends on ReportWritten, with no timer) or the worker is lost.
    until_final_report: bool = False


@dataclass(frozen=True, slots=True)
class ReportWritten:
    """The response to the agent's final report is on the wire: dispatch may resume."""

    job_id: str


@dataclass(frozen=True, slots=True)
class Drain:
    pass


@dataclass(frozen=True, slots=True)
class Resume:
    pass


@dataclass(frozen=True, slots=True)
class Quarantine:
    """Take no new job: ``actor`` is who decided (an admin, or "orchestrator")."""

    reason: str
    actor: str


@dataclass(frozen=True, slots=True)
class Unquarantine:
    actor: str


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """An attempt of ``job_id`` ended on this worker: ``kind`` None when it completed
    (fsm/failure_kinds.py). The worker's quarantine policy counts it."""

    job_id: str
    kind: str | None
    signature: str | None
    at: float


@dataclass(frozen=True, slots=True)
class SucceededElsewhere:
    """A job that failed on this worker completed on another: the failure was this
    worker's after all."""

    job_id: str


@dataclass(frozen=True, slots=True)
class TokenRotated:
    """The old token is gone: close its open stream."""


@dataclass(frozen=True, slots=True)
class StaysForWork:
    """An ephemeral worker's agent asked for more work after its job, and there is some."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Reply: the worker's public view (a dict for the API)."""


@dataclass(frozen=True, slots=True)
class Retire:
    """The worker is being deleted: close the stream, drop the job if forced."""

    force: bool


# --- to a JobActor ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DispatchTo:
    worker_id: str


# StatusReported.status of the job progress a heartbeat carried: no agent sends this word.
HEARTBEAT_PROGRESS = "progress"


@dataclass(frozen=True, slots=True)
class StatusReported:
    """``attempt`` is the dispatch the report is about, when the agent says (tunefleet's
    does; SimpleTuner's does not): a report on an earlier attempt must not touch this one."""

    worker_id: str
    status: str
    progress: dict[str, Any] | None
    error: str | None
    attempt: int | None = None
    # A `completed` report's word on the outputs: {"stored": true, "keys", "bytes"} or
    # {"stored": false, "reason"} (tunefleet's agent; SimpleTuner's sends none).
    outputs: dict[str, Any] | None = None
    # The stored checkpoint the trainer started from (tunefleet's agent, once restored).
    resumed_from: str | None = None
    # A failed report's evidence (protocol FailureEvidence, as a dict): tunefleet's agent.
    failure: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class WorkerLost:
    worker_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class ReconnectGraceExpired:
    """A worker's stream stayed closed for the reconnect grace (this generation of it)."""

    generation: int


@dataclass(frozen=True, slots=True)
class NotDelivered:
    """The worker's stream closed before it acknowledged this attempt, and it did not
    reconnect within the grace: the job_submit reached nobody."""

    worker_id: str
    attempt: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class AckTimeoutExpired:
    """This attempt's dispatch was not acknowledged within dispatch_ack_timeout_s."""

    attempt: int


@dataclass(frozen=True, slots=True)
class RunTimeoutExpired:
    """This attempt ran for the job's timeout_minutes."""

    attempt: int


@dataclass(frozen=True, slots=True)
class CancelGraceExpired:
    """The agent did not confirm a stop of this attempt within cancel_grace_s."""

    attempt: int


@dataclass(frozen=True, slots=True)
class PreemptGraceExpired:
    """The agent did not report on this preempted attempt within the grace and slack."""

    attempt: int


@dataclass(frozen=True, slots=True)
class PreemptJob:
    """Stop the job's attempt so its worker can take other work; the job is requeued."""

    reason: str
    actor: str


@dataclass(frozen=True, slots=True)
class CancelJob:
    reason: str
    actor: str


@dataclass(frozen=True, slots=True)
class DecideApproval:
    """A lead's or an admin's decision on a job awaiting approval; ``reason`` for a reject."""

    approve: bool
    actor: str
    reason: str | None = None


# --- to the Scheduler -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobWaiting:
    job: PendingJob


@dataclass(frozen=True, slots=True)
class JobGone:
    job_id: str


@dataclass(frozen=True, slots=True)
class WorkerChanged:
    """A worker's availability or capabilities changed. ``view`` is None once the worker
    is offline or deleted; ``schedulable`` says whether it may take a job right now."""

    worker_id: str
    view: WorkerView | None
    schedulable: bool


@dataclass(frozen=True, slots=True)
class SchedulePass:
    """Run one matching pass (coalesced; sent by the scheduler to itself)."""


@dataclass(frozen=True, slots=True)
class PlaceNewJob:
    """Reply: the id of the idle worker a job not yet stored goes to (taken from the
    idle set), or MustWait when it must wait in the queue like any other. Only a worker
    no older pending job could take is chosen, so a new job never jumps the queue."""

    job: PendingJob


@dataclass(frozen=True, slots=True)
class MustWait:
    """PlaceNewJob's reply for a job no idle worker may take: why it will wait. A wait
    reason depends on the fleet, never on the queue, so it is the one the job has once
    queued (unless a worker changes meanwhile) and is stored in the job's first write."""

    reason: str


@dataclass(frozen=True, slots=True)
class QueueNewJob:
    """A just-stored job joins the queue (JobWaiting) and the pass it makes owed runs at
    once. Reply: (position, reason) as QueuePlace would answer then; (None, None) when
    that pass dispatched it. One ask where a submission used to make three."""

    job: PendingJob


@dataclass(frozen=True, slots=True)
class HasWorkFor:
    """Reply: whether a pending job would qualify for this worker."""

    worker: WorkerView


@dataclass(frozen=True, slots=True)
class ExplainWait:
    job_id: str


@dataclass(frozen=True, slots=True)
class QueuePlace:
    """Reply: (position, reason): where a pending job stands in the order pending jobs
    are considered (1 is next), and why it waits; (None, None) when it is not pending."""

    job_id: str


@dataclass(frozen=True, slots=True)
class SetConcurrencyLimits:
    """The concurrency limits changed (or were loaded): the next passes go by them. A
    raised limit may free jobs, so a pass follows; running jobs are never stopped."""

    limits: ConcurrencyLimits


@dataclass(frozen=True, slots=True)
class LimitUsage:
    """Reply: the running jobs' Usage as the limits count it (tenancy_limits.py)."""


@dataclass(frozen=True, slots=True)
class SetTeamQuotas:
    """The teams' quotas, weights and borrowing limits changed (or were loaded): the
    next passes order and reclaim by them (fair_share.py); running jobs are not touched
    by the change itself."""

    quotas: Mapping[str, TeamQuota]


@dataclass(frozen=True, slots=True)
class QuotaStandings:
    """Reply: per team, its quota, GPUs held, borrowed and fair-share standing."""
