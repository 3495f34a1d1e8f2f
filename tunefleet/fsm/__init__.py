"""Lifecycles as data: states, transition tables, guards. No I/O."""

from tunefleet.fsm.errors import IllegalTransition
from tunefleet.fsm.job import (
    DEFAULT_MAX_RETRIES,
    JOB_LIFECYCLE,
    JOB_TRANSITIONS,
    MAX_UNDELIVERED,
    PREEMPTED,
    TERMINAL_JOB_STATES,
    JobFsmMixin,
    JobState,
    JobStateName,
)
from tunefleet.fsm.lifecycle import Lifecycle
from tunefleet.fsm.worker import (
    WORKER_LIFECYCLE,
    WORKER_TRANSITIONS,
    WorkerFsmMixin,
    WorkerState,
    WorkerStateName,
)

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "JOB_LIFECYCLE",
    "JOB_TRANSITIONS",
    "MAX_UNDELIVERED",
    "PREEMPTED",
    "TERMINAL_JOB_STATES",
    "WORKER_LIFECYCLE",
    "WORKER_TRANSITIONS",
    "IllegalTransition",
    "JobFsmMixin",
    "JobState",
    "JobStateName",
    "Lifecycle",
    "WorkerFsmMixin",
    "WorkerState",
    "WorkerStateName",
]
