"""Bodies of the preemption endpoint (routes_preemption.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tunefleet.http.schemas_common import ShortText, StrictRequestModel, SuccessResponse


class PreemptJobRequest(StrictRequestModel):
    """``reason``: why, for the job's timeline and the audit log (optional)."""

    reason: ShortText | None = None


class PreemptJobResponse(SuccessResponse):
    """The stop is under way: the job goes back to the queue once its worker has stopped
    the trainer (within ``grace_seconds`` plus the orchestrator's slack)."""

    job_id: str
    status: Literal["preempting"]
    attempt: int = Field(description="The attempt being stopped; it ends `preempted`.")
    worker_id: str | None
    grace_seconds: float = Field(
        description="The trainer's time after SIGTERM to write a checkpoint and exit."
    )
