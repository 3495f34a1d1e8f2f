"""Stored rows as the actors hold them (worker and job records), and the rows a
submitted job starts with: pure conversions between storage and actors/records.py."""

from __future__ import annotations

from typing import Any

from tunefleet.actors.records import JobRecord, WorkerRecord
from tunefleet.storage.rows import JobRow, WorkerRow
from tunefleet.storage.store import Repos


def worker_record(row: WorkerRow) -> WorkerRecord:
    return WorkerRecord(
        worker_id=row.id,
        name=row.name,
        worker_type=row.worker_type,
        state=row.state,
        drain_requested=row.drain_requested,
        is_local=row.is_local,
        labels=dict(row.labels),
        agent_labels=dict(row.agent_labels),
        gpu_info=dict(row.gpu_info),
        gpu_count=row.gpu_count,
        gpu_name=row.gpu_name,
        gpu_vram_gb=row.gpu_vram_gb,
        accelerator_type=row.accelerator_type,
        provider=row.provider,
        current_job_id=row.current_job_id,
        persistent_agent=row.persistent_agent,
        hostname=row.hostname,
        client_address=row.client_address,
        last_event_id=row.last_event_id,
        gpu_utilization=list(row.gpu_utilization),
        vram_used_gb=list(row.vram_used_gb),
        last_heartbeat_at=row.last_heartbeat_at,
        connected_at=row.connected_at,
        last_seen_at=row.last_seen_at,
        offline_at=row.offline_at,
        created_at=row.created_at,
        agent_name=row.agent_name,
        quarantine_reason=row.quarantine_reason,
        quarantined_at=row.quarantined_at,
    )


def job_record(row: JobRow) -> JobRecord:
    return JobRecord(
        job_id=row.id,
        seq=row.seq,
        state=row.state,
        target=row.target,
        config=dict(row.config),
        config_name=row.config_name,
        name=row.name,
        dataloader=row.dataloader,
        command=list(row.command) if row.command is not None else None,
        env=dict(row.env),
        worker_labels=dict(row.worker_labels),
        gpu_count=row.gpu_count,
        min_vram_gb=row.min_vram_gb,
        gpu_name=row.gpu_name,
        priority=row.priority,
        max_retries=row.max_retries,
        attempts=row.attempts,
        timeout_minutes=row.timeout_minutes,
        worker_id=row.worker_id,
        submitted_by=row.submitted_by,
        submitted_at=row.submitted_at,
        dispatched_at=row.dispatched_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        progress=dict(row.progress) if row.progress else None,
        error=row.error,
        wait_reason=row.wait_reason,
        user_name=row.user_name,
        team_name=row.team_name,
        local_unisolated=bool(row.local_unisolated),
    )


def insert_submitted(repos: Repos, rec: JobRecord, **placed: Any) -> int:
    """The job row and its "submitted" timeline entry; its seq. ``placed``: the state and
    dispatch columns of a job stored already dispatched."""
    seq = repos.jobs.insert(
        rec.job_id,
        config=rec.config,
        name=rec.name,
        config_name=rec.config_name,
        dataloader=rec.dataloader,
        command=rec.command,
        env=rec.env,
        target=rec.target,
        worker_labels=rec.worker_labels,
        gpu_count=rec.gpu_count,
        min_vram_gb=rec.min_vram_gb,
        gpu_name=rec.gpu_name,
        priority=rec.priority,
        max_retries=rec.max_retries,
        timeout_minutes=rec.timeout_minutes,
        submitted_by=rec.submitted_by,
        submitted_at=rec.submitted_at,
        user_name=rec.user_name,
        team_name=rec.team_name,
        local_unisolated=rec.local_unisolated,
        **placed,
    )
    repos.jobs.insert_event(
        rec.job_id,
        "submitted",
        detail={"by": rec.submitted_by, "target": rec.target},
        at=rec.submitted_at,
    )
    return seq
