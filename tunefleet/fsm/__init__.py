"""Lifecycles as data: states, transition tables, guards. No I/O."""

from tunefleet.fsm.errors import IllegalTransition
from tunefleet.fsm.job import (
    DEFAULT_MAX_RETRIES,
    JOB_LIFECYCLE,
    JOB_TRANSITIONS,
    TERMINAL_JOB_STATES,
    JobFsmMixin,
    JobState,
)
from tunefleet.fsm.lifecycle import Lifecycle
from tunefleet.fsm.worker import WORKER_LIFECYCLE, WORKER_TRANSITIONS, WorkerFsmMixin, WorkerState

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "JOB_LIFECYCLE",
    "JOB_TRANSITIONS",
    "TERMINAL_JOB_STATES",
    "WORKER_LIFECYCLE",
    "WORKER_TRANSITIONS",
    "IllegalTransition",
    "JobFsmMixin",
    "JobState",
    "Lifecycle",
    "WorkerFsmMixin",
    "WorkerState",
]
