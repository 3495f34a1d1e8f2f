"""The events of a worker's job stream (orchestrator → agent, ``GET /api/workers/stream``).

Each event's data is one JSON object whose ``type`` repeats the SSE event name
(SimpleTuner's agent reads only ``data:`` lines and takes the type from there). The
orchestrator builds every event from these models, and tunefleet's agent and the local
runner read them with the same models, so the two ends cannot drift apart.

Reading is forgiving field by field, as an agent must be with an orchestrator that may
be SimpleTuner's own or newer than itself: unknown fields are ignored, and a field the
agent cannot read (a null token, a non-object config) counts as absent. Only an event
without the id it acts on is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from tunefleet.protocol.fields import Forgiving, ResponseModel


def _env_in(value: Any) -> Any:
    # Values the trainer will see as text anyway; a null value is no variable at all.
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if v is not None}


def _none_if_empty(value: Any) -> Any:
    return value or None


JobId = Annotated[str, Field(min_length=1)]
# The trainer's data-loader configuration: passed on as sent (SimpleTuner's is a list).
Dataloader = Annotated[
    Any, WithJsonSchema({"anyOf": [{"type": "object"}, {"type": "array"}, {"type": "null"}]})
]


class EventModel(ResponseModel):
    """An event's data. The orchestrator always sends every field (null included), so
    the schema marks every field required: SimpleTuner's agent reads
    ``upload_endpoint`` and ``upload_token`` unconditionally."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class JobRequirements(EventModel):
    """What the job asked of its worker (the local runner gives it ``gpu_count`` GPUs)."""

    target: str
    gpu_count: int
    min_vram_gb: float | None = None
    gpu_name: str | None = None
    worker_labels: dict[str, str] = Field(default_factory=dict)


class JobSubmitEvent(EventModel):
    """``upload_endpoint`` must be present and ``upload_token`` a string (never null):
    SimpleTuner's agent reads both unconditionally. ``upload_endpoint`` is a path
    (``/api/artifacts``) that agent puts its orchestrator URL in front of.
    ``resume_checkpoint`` names the newest complete stored checkpoint a retry should
    resume from (null: start from step 0). ``config_name``, ``attempt``, ``command``,
    ``env`` and ``requirements`` are tunefleet's additions."""

    type: Literal["job_submit"] = "job_submit"
    job_id: JobId
    config: Annotated[dict[str, Any], Forgiving] = Field(default_factory=dict)
    dataloader: Dataloader = None
    provider: Annotated[str | None, Forgiving] = None
    upload_endpoint: Annotated[str, Forgiving] = ""
    upload_token: Annotated[str, Forgiving] = ""
    resume_checkpoint: Annotated[str | None, Forgiving, AfterValidator(_none_if_empty)] = None
    hf_token: Annotated[str | None, Forgiving] = None
    config_name: Annotated[str | None, Forgiving] = None
    # Which dispatch of the job this is; reports name it. An agent reads a missing or
    # unreadable one as the first.
    attempt: Annotated[int, Field(ge=1, strict=True), Forgiving] = 1
    # None (or empty): the worker's default command.
    command: Annotated[list[str] | str | None, Forgiving, AfterValidator(_none_if_empty)] = None
    env: Annotated[dict[str, str], BeforeValidator(_env_in)] = Field(default_factory=dict)
    requirements: Annotated[JobRequirements | None, Forgiving] = None


# The reason a cancel gives when nobody said why: text shown to the user and the agent,
# the same word as the status the job ends with.
DEFAULT_CANCEL_REASON = "cancelled"


class JobCancelEvent(EventModel):
    """``preempt`` and ``grace_seconds`` are tunefleet's additions (SimpleTuner's agent
    ignores them and stops its trainer as for any cancel): the job is being preempted,
    not cancelled, and its trainer has ``grace_seconds`` after SIGTERM to write a
    checkpoint and exit before it is killed. The orchestrator requeues the job."""

    type: Literal["job_cancel"] = "job_cancel"
    job_id: JobId
    reason: Annotated[str | None, Forgiving] = None
    preempt: Annotated[bool, Forgiving] = False
    grace_seconds: Annotated[float | None, Field(ge=0), Forgiving] = None


class DrainEvent(EventModel):
    type: Literal["drain"] = "drain"


class ShutdownEvent(EventModel):
    """``reason`` at the top level, as the protocol (and SimpleTuner's agent) reads it;
    SimpleTuner's server nests it under ``data``, which is read too."""

    type: Literal["shutdown"] = "shutdown"
    reason: Annotated[str, Forgiving] = "no reason given"

    @model_validator(mode="before")
    @classmethod
    def _nested_reason(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("reason"):
            nested = data.get("data")
            reason = nested.get("reason") if isinstance(nested, dict) else None
            data = {k: v for k, v in data.items() if k != "reason"}
            if reason:
                data["reason"] = reason
        return data


class PingEvent(EventModel):
    type: Literal["ping"] = "ping"


StreamEvent = JobSubmitEvent | JobCancelEvent | DrainEvent | ShutdownEvent | PingEvent

Event = TypeVar("Event", bound=EventModel)


def read_event(model: type[Event], data: Mapping[str, Any]) -> Event | None:
    """An event's data read with its model; None when it lacks what it cannot do without
    (the job id of a job_submit or job_cancel): such an event is ignored, never a crash.
    The type was read already (from ``type``, or the SSE event name when that is absent),
    so it is not read again."""
    try:
        return model.model_validate({k: v for k, v in data.items() if k != "type"})
    except ValidationError:
        return None
