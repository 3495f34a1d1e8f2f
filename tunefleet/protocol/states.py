"""The status words a job and a worker show on the wire, for clients that must not import
the orchestrator's lifecycles (tunefleet.client). tests/fsm holds them to the enums."""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

JobStatusName: TypeAlias = Literal[
    "pending_approval", "pending", "dispatched", "running", "completed", "failed", "cancelled"
]
WorkerStatusName: TypeAlias = Literal["connecting", "idle", "busy", "draining", "offline"]

JOB_COMPLETED: Final = "completed"
TERMINAL_JOB_STATUSES: Final = frozenset({JOB_COMPLETED, "failed", "cancelled"})
