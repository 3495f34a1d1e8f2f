"""Building blocks of the wire schemas: base models, bounded strings, labels, JSON blobs.

Every string a client sends is bounded. Bodies a person writes (admin and queue) refuse
unknown fields: a misspelt ``worker_label`` silently ignored ran a job where its label
would have kept it out. What agents send to the worker endpoints ignores them
(SimpleTuner's agent, and newer tunefleet agents, may send more than this version
knows), and so do query strings.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from tunefleet.fsm.job import JobState, JobStateName
from tunefleet.fsm.worker import WorkerState, WorkerStateName

# The building blocks are the protocol's (the worker endpoints' models are built of them);
# the user-facing schemas import them from here with the rest.
from tunefleet.protocol.fields import (
    DEFAULT_MAX_STRING,
    ConfigObject,
    DataloaderJson,
    Identifier,
    JsonKey,
    LabelGlobs,
    Labels,
    LogStream,
    LongText,
    PlainName,
    ProgressObject,
    ReportedJobStatus,
    RequestModel,
    ResponseModel,
    ShortText,
    VersionText,
    WorkerType,
    json_object_limit,
    scalars_as_text,
    truncating,
)

__all__ = [
    "DEFAULT_MAX_STRING",
    "JOB_STATUSES",
    "WORKER_STATUSES",
    "ConfigObject",
    "DataloaderJson",
    "ErrorResponse",
    "Identifier",
    "JobStatus",
    "JsonKey",
    "LabelGlobs",
    "Labels",
    "LogStream",
    "LongText",
    "PlainName",
    "ProgressObject",
    "ReportedJobStatus",
    "RequestModel",
    "ResponseModel",
    "ShortText",
    "StrictRequestModel",
    "SuccessResponse",
    "Target",
    "VersionText",
    "WorkerStatus",
    "WorkerType",
    "json_object_limit",
    "scalars_as_text",
    "truncating",
]

WorkerStatus = WorkerStateName
WORKER_STATUSES: tuple[str, ...] = tuple(state.value for state in WorkerState)
JobStatus = JobStateName
JOB_STATUSES: tuple[str, ...] = tuple(state.value for state in JobState)
Target = Literal["worker", "local", "auto"]


class StrictRequestModel(RequestModel):
    """A body a person writes (admin and queue endpoints), where silently ignoring a
    misspelt field would mislead: an unknown field is a 400 naming it and the closest
    known one (``unknown field 'worker_label' (did you mean 'worker_labels'?)``)."""

    model_config = ConfigDict(extra="forbid")


class ErrorResponse(ResponseModel):
    """Every error: one line saying what is wrong and what to send instead."""

    detail: str = Field(examples=["gpu_count: must be ≥ 0"])


class SuccessResponse(ResponseModel):
    success: bool = True
