"""Worker-side wire schemas (agent → orchestrator, X-Worker-Token; the job stream's events).

They are the protocol's models (tunefleet/protocol/), which the agent and the local
runner share; imported here so the HTTP room finds every schema in one family.
"""

from __future__ import annotations

from tunefleet.protocol.endpoints import (
    MAX_ERROR_CHARS,
    MAX_GPUS,
    MAX_LOG_LINE_CHARS,
    MAX_LOG_LINES,
    MAX_SAMPLES,
    MAX_VRAM_GB,
    DisconnectRequest,
    GpuInfo,
    HeartbeatRequest,
    JobLogsRequest,
    JobStatusRequest,
    LogBatchResponse,
    LogLine,
    OutputsReport,
    QueueCheckResponse,
    RegisterRequest,
    RegisterResponse,
    ResumeJob,
    WorkerIdQuery,
)
from tunefleet.protocol.events import (
    DrainEvent,
    JobCancelEvent,
    JobRequirements,
    JobSubmitEvent,
    PingEvent,
    ShutdownEvent,
    StreamEvent,
)

__all__ = [
    "MAX_ERROR_CHARS",
    "MAX_GPUS",
    "MAX_LOG_LINES",
    "MAX_LOG_LINE_CHARS",
    "MAX_SAMPLES",
    "MAX_VRAM_GB",
    "DisconnectRequest",
    "DrainEvent",
    "GpuInfo",
    "HeartbeatRequest",
    "JobCancelEvent",
    "JobLogsRequest",
    "JobRequirements",
    "JobStatusRequest",
    "JobSubmitEvent",
    "LogBatchResponse",
    "LogLine",
    "OutputsReport",
    "PingEvent",
    "QueueCheckResponse",
    "RegisterRequest",
    "RegisterResponse",
    "ResumeJob",
    "ShutdownEvent",
    "StreamEvent",
    "WorkerIdQuery",
]
