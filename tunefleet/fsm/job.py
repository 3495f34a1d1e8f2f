"""The job lifecycle: states, the transition table, the retry policy and its guards.

``attempts`` counts dispatches: ``dispatch`` increments it. A lost attempt (worker gone,
or never acknowledged) puts the job back to pending while retries remain, so a job runs
at most ``max_retries + 1`` times; after that it fails. A dispatch that never reached
the worker (its stream closed before the acknowledgement, and it did not reconnect
within the grace) is ``undelivered``: it keeps its attempt number, so reports on it are
still told apart, but it does not count against ``max_retries``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final, Literal, TypeAlias

from tunefleet.fsm.lifecycle import Lifecycle

DEFAULT_MAX_RETRIES: Final = 3


class JobState(StrEnum):
    PENDING = "pending"  # waiting for a worker
    DISPATCHED = "dispatched"  # given to a worker, not yet acknowledged
    RUNNING = "running"  # the worker's first status report acknowledged it
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


# The states as a type, for wire schemas: pydantic renders a Literal inline in OpenAPI and
# in its error messages, as the API always has. A test holds it to JobState.
JobStateName: TypeAlias = Literal[
    "pending", "dispatched", "running", "completed", "failed", "cancelled"
]

TERMINAL_JOB_STATES: Final = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})

JOB_TRANSITIONS: tuple[dict[str, Any], ...] = (
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
    # The worker was lost or never acknowledged: retry while retries remain, else fail.
    {
        "trigger": "lose",
        "source": ["dispatched", "running"],
        "dest": "pending",
        "conditions": "retries_left",
    },
    {
        "trigger": "lose",
        "source": ["dispatched", "running"],
        "dest": "failed",
        "unless": "retries_left",
    },
    {"trigger": "cancel", "source": ["pending", "dispatched", "running"], "dest": "cancelled"},
)

JOB_LIFECYCLE = Lifecycle("job", JobState, JOB_TRANSITIONS, id_attr="job_id")


class JobFsmMixin:
    """What the job table needs from its model: the attributes it reads and the guard and
    effect methods it names. Actors and tests inherit it and set the attributes themselves."""

    job_id: str
    state: str
    attempts: int
    max_retries: int
    undelivered: int = 0  # dispatches that never reached the worker (not retries)

    # --- guards -----------------------------------------------------------------------

    def retries_left(self) -> bool:
        """Whether another attempt is allowed (attempts counts the dispatches so far)."""
        return self.attempts - self.undelivered <= self.max_retries

    # --- effects: only the model's own counter, no I/O ---------------------------------

    def count_attempt(self) -> None:
        self.attempts += 1
