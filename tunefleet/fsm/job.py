"""The job lifecycle: states, the transition table, the retry policy and its guards.

``attempts`` counts dispatches: ``dispatch`` increments it. A lost attempt (its worker
gone after acknowledging it) puts the job back to pending while retries remain, so a job
runs at most ``max_retries + 1`` times; after that it fails. A dispatch that was never
acknowledged (its stream closed before the acknowledgement and did not come back within
the grace, or no report came within the acknowledgement timeout) is ``undelivered``: it
keeps its attempt number, so reports on it are still told apart, but it does not count
against ``max_retries``, since the job never started. SimpleTuner's agent drops a
``job_submit`` that races its own completion report, and the job must not pay for that.
So that an agent which takes jobs and never acknowledges one cannot bounce a job
forever, the job fails at its ``MAX_UNDELIVERED``-th undelivered dispatch.

An attempt that failed for infrastructure reasons (its worker lost or shut down,
OOM-killed, CUDA, NCCL or Xid errors, a GPU gone, the disk full:
tunefleet/fsm/failure_kinds.py) is counted in
``infra_failures``, not against ``max_retries``: it has its own budget,
``infra_retries`` (the server's --infra-retries). A job error (the trainer failed on
its own) spends a retry; actors/retry_policy.py fails a job at once whose error repeats
on a second worker.

A ``preempt``ed attempt (the orchestrator took its worker back for other work, or an
administrator asked) ends ``preempted`` and puts the job back to pending whatever its
retries: it spends neither a retry nor the infrastructure budget (``preempted`` counts
them apart), since neither the job nor its worker did anything wrong. The stop itself
(job_cancel, the trainer's grace to write a checkpoint) happens while the job is still
dispatched or running; the transition fires when the worker has confirmed it, or when
the orchestrator stopped waiting (actors/preemption.py).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final, Literal, TypeAlias

from tunefleet.fsm.lifecycle import Lifecycle

DEFAULT_MAX_RETRIES: Final = 3
# Undelivered dispatches (stream closed and acknowledgement timeout together) a job may
# have in all: the last one fails it. A few cover a racing or reconnecting agent; more
# means its workers' agents take jobs and never report on them.
MAX_UNDELIVERED: Final = 5
# Infrastructure failures a job may be retried after (the last one past it fails it).
DEFAULT_INFRA_RETRIES: Final = 5
# The outcome of an attempt that was preempted (stored on the attempt and its timeline).
PREEMPTED: Final = "preempted"


class JobState(StrEnum):
    # An approval rule matched at submit: never scheduled until a lead or admin decides.
    PENDING_APPROVAL = "pending_approval"
    PENDING = "pending"  # waiting for a worker
    DISPATCHED = "dispatched"  # given to a worker, not yet acknowledged
    RUNNING = "running"  # the worker's first status report acknowledged it
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


# The states as a type, for wire schemas: pydantic renders a Literal inline in OpenAPI and
# in its error messages, as the API always has. A test holds it to JobState.
JobStateName: TypeAlias = Literal[
    "pending_approval", "pending", "dispatched", "running", "completed", "failed", "cancelled"
]

TERMINAL_JOB_STATES: Final = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})

JOB_TRANSITIONS: tuple[dict[str, Any], ...] = (
    # A lead of its team or an admin approved it: it joins the queue in its original place
    # (the actor keeps its submit time and sequence).
    {"trigger": "approve", "source": "pending_approval", "dest": "pending"},
    # Rejected with a reason: it ends cancelled (the reason is its error), so every view,
    # count and filter of ended jobs already knows the state.
    {"trigger": "reject", "source": "pending_approval", "dest": "cancelled"},
    # The scheduler gave it to a worker: one more attempt, while the policy allows one.
    {
        "trigger": "dispatch",
        "source": "pending",
        "dest": "dispatched",
        "conditions": "retries_left",
        "before": "count_attempt",
    },
    # The worker's first status report for this attempt acknowledges the dispatch.
    {"trigger": "start", "source": "dispatched", "dest": "running"},
    {"trigger": "complete", "source": "running", "dest": "completed"},
    {"trigger": "fail", "source": ["pending", "dispatched", "running"], "dest": "failed"},
    # The attempt is lost to the job: its worker was lost or never acknowledged, or it
    # failed and may be retried. Back to the queue while its budget remains (retries;
    # for an undelivered dispatch deliveries; for an infrastructure failure infra
    # retries), else fail.
    {
        "trigger": "lose",
        "source": ["dispatched", "running"],
        "dest": "pending",
        "conditions": "may_requeue",
    },
    {
        "trigger": "lose",
        "source": ["dispatched", "running"],
        "dest": "failed",
        "unless": "may_requeue",
    },
    # Preempted: its worker was taken back. Back to the queue, whatever its retries (the
    # attempt is counted in ``preempted``, never against max_retries).
    {
        "trigger": "preempt",
        "source": ["dispatched", "running"],
        "dest": "pending",
        "before": "count_preemption",
    },
    {
        "trigger": "cancel",
        "source": ["pending_approval", "pending", "dispatched", "running"],
        "dest": "cancelled",
    },
)

JOB_LIFECYCLE = Lifecycle("job", JobState, JOB_TRANSITIONS, id_attr="job_id")


class JobFsmMixin:
    """What the job table needs from its model: the attributes it reads and the guard and
    effect methods it names. Actors and tests inherit it and set the attributes themselves."""

    job_id: str
    state: str
    attempts: int
    max_retries: int
    undelivered: int = 0  # dispatches never acknowledged (not retries), this one included
    infra_failures: int = 0  # attempts ended by infrastructure (not retries), this one included
    infra_retries: int = DEFAULT_INFRA_RETRIES
    preempted: int = 0  # attempts that ended preempted (neither retries nor infra failures)

    # --- guards -----------------------------------------------------------------------

    def retries_left(self) -> bool:
        """Whether another attempt is allowed (attempts counts the dispatches so far;
        undelivered and preempted ones and infrastructure failures spend no retry)."""
        spent = self.attempts - self.undelivered - self.infra_failures - self.preempted
        return spent <= self.max_retries

    def infra_retries_left(self) -> bool:
        """Whether the infrastructure failures so far stay within their own budget."""
        return self.infra_failures <= self.infra_retries

    def deliveries_left(self) -> bool:
        """Whether the undelivered dispatches so far stay under the bound."""
        return self.undelivered < MAX_UNDELIVERED

    def may_requeue(self) -> bool:
        """Whether a lost, undelivered or failed attempt goes back to the queue (the caller
        counts an undelivered one in ``undelivered``, an infrastructure failure in
        ``infra_failures``, first)."""
        return self.retries_left() and self.deliveries_left() and self.infra_retries_left()

    # --- effects: only the model's own counter, no I/O ---------------------------------

    def count_attempt(self) -> None:
        self.attempts += 1

    def count_preemption(self) -> None:
        self.preempted += 1
