"""Stored job rows → the JSON the queue API returns."""

from __future__ import annotations

from typing import Any

from tunefleet.actors.records import iso
from tunefleet.fsm.job import TERMINAL_JOB_STATES, JobState
from tunefleet.http.schemas_queue import hide_env_values
from tunefleet.storage.rows import (
    AttemptsApart,
    JobAttemptRow,
    JobEventRow,
    JobLogRow,
    JobRow,
    attempts_apart,
)
from tunefleet.usage import AttemptSpan, attempt_gpu_seconds


def job_summary(row: JobRow, apart: AttemptsApart | None = None) -> dict[str, Any]:
    """`apart`: the row's attempts that spent no retry (never delivered, preempted, ended
    by the infrastructure)."""
    apart = apart or AttemptsApart()
    return {
        "job_id": row.id,
        "name": row.name,
        "config_name": row.config_name,
        "status": row.state,
        "target": row.target,
        "worker_id": row.worker_id,
        "priority": row.priority,
        "attempts": row.attempts,
        "undelivered": apart.undelivered,
        "preempted": apart.preempted,
        "infrastructure_failures": apart.infrastructure,
        "max_retries": row.max_retries,
        "gpu_count": row.gpu_count,
        "min_vram_gb": row.min_vram_gb,
        "gpu_name": row.gpu_name,
        "worker_labels": row.worker_labels,
        "timeout_minutes": row.timeout_minutes,
        "submitted_by": row.submitted_by,
        "user": row.user_name,
        "team": row.team_name,
        "submitted_at": iso(row.submitted_at),
        "dispatched_at": iso(row.dispatched_at),
        "started_at": iso(row.started_at),
        "finished_at": iso(row.finished_at) if row.state in TERMINAL_JOB_STATES else None,
        "progress": row.progress,
        "error": row.error,
        "wait_reason": row.wait_reason if row.state == JobState.PENDING else None,
        "queue_position": None,
    }


def job_detail(
    row: JobRow, attempts: list[JobAttemptRow], events: list[JobEventRow], now: float
) -> dict[str, Any]:
    """`now`: what a running attempt's GPU-seconds count up to."""
    return {
        **job_summary(
            row, attempts_apart((a.job_id, a.outcome, a.kind, 1) for a in attempts).get(row.id)
        ),
        "config": row.config,
        "dataloader": row.dataloader,
        "command": row.command,
        "env": hide_env_values(row.env),
        "attempt_history": [
            {
                "number": a.number,
                "worker_id": a.worker_id,
                "dispatched_at": iso(a.dispatched_at),
                "started_at": iso(a.started_at),
                "ended_at": iso(a.ended_at),
                "outcome": a.outcome,
                "reason": a.reason,
                "kind": a.kind,
                "signature": a.signature,
                "log_bytes": a.log_bytes,
                "log_lines_dropped": a.log_lines_dropped,
                "gpu_seconds": attempt_gpu_seconds(attempt_span(row, a), now),
            }
            for a in attempts
        ],
        "timeline": [
            {
                "at": iso(e.at),
                "kind": e.kind,
                "worker_id": e.worker_id,
                "attempt": e.attempt,
                "detail": e.detail,
            }
            for e in events
        ],
    }


def log_line_view(row: JobLogRow) -> dict[str, Any]:
    return {
        "seq": row.id,
        "attempt": row.attempt,
        "stream": row.stream,
        "line": row.line,
        "at": iso(row.at),
    }


def attempt_span(row: JobRow, attempt: JobAttemptRow) -> AttemptSpan:
    """The attempt as accounting sees it (tunefleet/usage.py)."""
    return AttemptSpan(
        row.id,
        attempt.number,
        row.user_name,
        row.team_name,
        row.gpu_count,
        attempt.dispatched_at,
        attempt.ended_at,
    )
