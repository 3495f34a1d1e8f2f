"""The executor's vocabulary: what to run, what it reports while running, how it ended."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from tunefleet.protocol.fields import LogStream
from tunefleet.protocol.status import ReportedStatus

# How an attempt ended: a terminal status word, as the agent reports it.
JobStatus: TypeAlias = Literal[
    ReportedStatus.COMPLETED, ReportedStatus.FAILED, ReportedStatus.CANCELLED
]


@dataclass(frozen=True, slots=True)
class ArtifactPlan:
    """Where a job attempt stores its outputs (``upload_endpoint``, ``upload_token`` of its
    job_submit) and the stored checkpoint it resumes from, if any."""

    endpoint: str
    token: str = field(repr=False)  # never in a log line
    resume_checkpoint: str | None = None
    # The endpoint's path on the orchestrator URL the agent uses, tried when the
    # advertised endpoint cannot be connected to; None when they are the same.
    fallback_endpoint: str | None = None


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One attempt of one job, as a `job_submit` event describes it."""

    job_id: str
    attempt: int
    config: Mapping[str, Any]
    dataloader: object | None = None  # data-loader configuration (list or dict) or None
    command: Sequence[str] | str | None = None  # None: the executor's default command
    env: Mapping[str, object] = field(default_factory=dict)
    artifacts: ArtifactPlan | None = None  # None: the job stores nothing (no upload endpoint)


@dataclass(frozen=True, slots=True)
class JobStarted:
    pid: int
    job_dir: Path
    resumed_from: str | None = None  # the stored checkpoint restored for the trainer


@dataclass(frozen=True, slots=True)
class ProgressReported:
    """The latest merged progress: step, total, loss, percent and any other metrics."""

    progress: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LogLine:
    seq: int  # 1, 2, 3 ... per attempt; a gap means lines were not forwarded
    stream: LogStream
    line: str
    at: float  # unix seconds


@dataclass(frozen=True, slots=True)
class LogBatch:
    lines: list[LogLine]


ExecutorEvent: TypeAlias = JobStarted | ProgressReported | LogBatch
EventCallback: TypeAlias = Callable[[ExecutorEvent], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class JobOutcome:
    status: JobStatus
    exit_code: int | None  # negative: killed by that signal; None: never started
    error: str | None
    tail: list[str]  # the last output lines, both streams, oldest first
    outputs: dict[str, Any] | None = None  # what was stored: the status report's "outputs"
    # A failed run's evidence: the status report's "failure" (exit code, signal, OOM
    # evidence, log tail), so the orchestrator can tell a machine's fault from the job's.
    failure: dict[str, Any] | None = None
