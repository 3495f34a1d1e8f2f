"""The status words an agent reports about its job, and what they mean for the job.

These are wire words (``POST /api/workers/job/{job_id}/status``), so their values never
change: SimpleTuner's agent sends them. ``training`` is that agent's word for running;
:func:`lifecycle_word` is the one place it becomes ``running``, at the wire's edge, so
nothing behind it ever sees ``training``.

The terminal words are the job's terminal states spelled the same; a test holds them to
:data:`tunefleet.fsm.TERMINAL_JOB_STATES`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Literal, TypeAlias


class ReportedStatus(StrEnum):
    STARTING = "starting"  # the agent took the job; the trainer is starting
    RUNNING = "running"
    TRAINING = "training"  # SimpleTuner's agent's word for running
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


# The words as a type, for wire schemas (see fsm.JobStateName). A test holds it to the enum.
ReportedStatusName: TypeAlias = Literal[
    "starting", "running", "training", "completed", "failed", "cancelled"
]

TERMINAL_STATUSES: Final = frozenset(
    {ReportedStatus.COMPLETED, ReportedStatus.FAILED, ReportedStatus.CANCELLED}
)
"""The words that end an attempt: the agent sends one last report and stops the job."""

RUNNING_STATUSES: Final = frozenset({ReportedStatus.STARTING, ReportedStatus.RUNNING})
"""The words (after :func:`lifecycle_word`) that say the job is alive and may carry progress."""


def lifecycle_word(status: str) -> str:
    """The word as the orchestrator means it: ``training`` is ``running``; the rest as sent."""
    return ReportedStatus.RUNNING.value if status == ReportedStatus.TRAINING else status
