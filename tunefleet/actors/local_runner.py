"""The local runner: `target: local` jobs run on the orchestrator's own GPUs.

It is the built-in worker ``w_local``, an in-process agent: it registers, reads its
stream and reports exactly as a remote agent does, through the same Fleet calls, so
one lifecycle, one scheduler and one set of tests serve both. Which user a job's trainer
runs as is its executor's choice (tunefleet/actors/local_executors.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import replace
from typing import Any

import structlog

from tunefleet.actors import messages as m
from tunefleet.actors.fleet import LOCAL_WORKER_ID, Fleet
from tunefleet.actors.local_executors import TrainerRunner
from tunefleet.actors.records import WorkerRecord
from tunefleet.actors.stream import StreamConnection, StreamEvent
from tunefleet.agent.executor import (
    JobOutcome,
    JobStarted,
    LogBatch,
    ProgressReported,
)
from tunefleet.agent.gpu import GpuInventory
from tunefleet.agent.job_submit import job_spec
from tunefleet.errors import BadRequest, Conflict
from tunefleet.fsm.worker import WorkerState
from tunefleet.protocol.endpoints import log_line
from tunefleet.protocol.events import (
    DEFAULT_CANCEL_REASON,
    JobCancelEvent,
    JobSubmitEvent,
    read_event,
)
from tunefleet.protocol.status import ReportedStatus

log = structlog.get_logger(__name__)


def local_worker_record(inventory: GpuInventory, now: float) -> WorkerRecord:
    fields = inventory.register_fields()
    return WorkerRecord(
        worker_id=LOCAL_WORKER_ID,
        name="local",
        worker_type="persistent",
        state=WorkerState.CONNECTING,
        is_local=True,
        labels={"location": "orchestrator"},
        gpu_info=dict(fields.get("gpu_info") or {}),
        gpu_count=inventory.count,
        gpu_name=inventory.name,
        gpu_vram_gb=inventory.vram_gb,
        accelerator_type=inventory.accelerator,
        created_at=now,
    )


class LocalRunner:
    def __init__(
        self,
        fleet: Fleet,
        executor: TrainerRunner,
        inventory: GpuInventory,
        heartbeat_interval_s: float = 30.0,
        orchestrator_url: str = "",
    ) -> None:
        self.fleet = fleet
        # Put in front of job_submit's upload_endpoint (a path), as a remote agent does.
        self.orchestrator_url = orchestrator_url
        self.executor = executor
        self.inventory = inventory
        self.heartbeat_interval_s = heartbeat_interval_s
        self._tasks: list[asyncio.Task[None]] = []
        self._job_task: asyncio.Task[None] | None = None
        self._current: str | None = None
        self._progress: dict[str, Any] | None = None
        self._attempt: int | None = None  # of the running job: reports are fenced by it

    async def start(self) -> None:
        fields = self.inventory.register_fields()
        await self.fleet.register(
            LOCAL_WORKER_ID,
            m.Register(
                name="local",
                gpu=dict(fields.get("gpu_info") or {}),
                persistent=True,
                agent_labels={},
                current_job_id=None,
                provider=None,
                hostname=socket.gethostname(),
                client_address="local",
                allowed_commands=self.executor.allowed_commands,
            ),
        )
        conn = await self.fleet.open_stream(LOCAL_WORKER_ID, None)
        self._tasks = [
            asyncio.create_task(self._read(conn), name="local-runner-stream"),
            asyncio.create_task(self._heartbeats(), name="local-runner-heartbeat"),
        ]

    async def stop(self) -> None:
        if self._current is not None:
            await self.executor.cancel("orchestrator shutting down")
        if self._job_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._job_task, timeout=30)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _heartbeats(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.fleet.heartbeat(
                    LOCAL_WORKER_ID,
                    m.HeartbeatReceived(
                        status=WorkerState.BUSY if self._current else WorkerState.IDLE,
                        current_job_id=self._current,
                        job_progress=self._progress,
                        gpu_utilization=None,
                        vram_used_gb=None,
                    ),
                )
            await asyncio.sleep(self.heartbeat_interval_s)

    async def _read(self, conn: StreamConnection) -> None:
        while True:
            event = await conn.queue.get()
            if event is None:
                return
            await self._on_event(event)

    async def _on_event(self, event: StreamEvent) -> None:
        if event.type == "job_submit" and self._current is None:
            submit = read_event(JobSubmitEvent, event.data)
            if submit is None:
                log.warning("local runner ignores a job_submit without a job_id")
                return
            self._current = submit.job_id
            self._job_task = asyncio.create_task(
                self._run(submit), name=f"local-job-{self._current}"
            )
        elif event.type == "job_cancel":
            cancel = read_event(JobCancelEvent, event.data)
            if cancel is not None and cancel.job_id == self._current:
                grace = cancel.grace_seconds if cancel.preempt else None  # a preemption's
                await self.executor.cancel(cancel.reason or DEFAULT_CANCEL_REASON, grace)

    async def _run(self, submit: JobSubmitEvent) -> None:
        job_id = submit.job_id
        # Read as a remote agent reads it (same code, same rules): outputs go to the
        # artifact store, credentials and variables reach the trainer alike.
        spec = job_spec(submit, self.orchestrator_url)
        spec = replace(spec, env={**spec.env, **self._gpu_env(submit)})
        self._attempt = spec.attempt
        try:
            await self._report(job_id, ReportedStatus.STARTING, None, None)

            async def on_event(ev: object) -> None:
                if isinstance(ev, JobStarted) and ev.resumed_from is not None:
                    await self._report(
                        job_id, ReportedStatus.RUNNING, None, None, resumed_from=ev.resumed_from
                    )
                elif isinstance(ev, ProgressReported):
                    self._progress = ev.progress
                    await self._report_progress(job_id, ev.progress)
                elif isinstance(ev, LogBatch):
                    lines = [log_line(ln.seq, ln.stream, ln.line, ln.at) for ln in ev.lines]
                    await self._report_logs(job_id, spec.attempt, lines)

            outcome: JobOutcome = await self.executor.run(spec, on_event)
            await self._report(
                job_id, outcome.status, self._progress, outcome.error, outcome.outputs
            )
        except Exception as error:
            log.exception("local job failed to run", job_id=job_id)
            with contextlib.suppress(Exception):
                await self._report(
                    job_id, ReportedStatus.FAILED, None, f"local runner error: {error}"
                )
        finally:
            self._current = None
            self._progress = None
            self.fleet.report_written(LOCAL_WORKER_ID, job_id)

    async def _report_progress(self, job_id: str, progress: dict[str, Any]) -> None:
        try:
            await self._report(job_id, ReportedStatus.RUNNING, progress, None)
        except BadRequest as error:  # past the progress bounds: the job runs on without it
            log.warning("local job progress refused", job_id=job_id, reason=str(error))

    async def _report_logs(
        self, job_id: str, attempt: int | None, lines: list[dict[str, Any]]
    ) -> None:
        """Through the same path and quota as a remote agent's; a quota reached is no
        error, and lines of an attempt that has ended are dropped as the agent drops them."""
        try:
            await self.fleet.report_logs(LOCAL_WORKER_ID, job_id, attempt, lines)
        except Conflict as error:
            log.info("local job log batch dropped", job_id=job_id, reason=str(error))

    def _gpu_env(self, submit: JobSubmitEvent) -> dict[str, str]:
        """Give the job the GPUs it asked for (all of them when it named none)."""
        if self.inventory.count == 0:
            return {}
        wanted = submit.requirements.gpu_count if submit.requirements is not None else 0
        count = min(wanted or self.inventory.count, self.inventory.count)
        indices = [str(d.index) for d in self.inventory.devices[:count]]
        return {"CUDA_VISIBLE_DEVICES": ",".join(indices)}

    async def _report(
        self,
        job_id: str,
        status: str,
        progress: dict[str, Any] | None,
        error: str | None,
        outputs: dict[str, Any] | None = None,
        resumed_from: str | None = None,
    ) -> None:
        report = m.StatusReported(
            LOCAL_WORKER_ID,
            status,
            progress,
            error,
            self._attempt,
            outputs=outputs,
            resumed_from=resumed_from,
        )
        await self.fleet.report_status(LOCAL_WORKER_ID, job_id, report)
