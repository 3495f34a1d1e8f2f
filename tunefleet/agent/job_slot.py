"""The one job a worker holds: taking it from a job_submit, running it through the
executor, turning what it does into reports, cancelling or abandoning it.

A job is held from the moment it is taken until its final report is delivered (or it
is abandoned): that is the ``current_job_id`` the agent reports on re-registration, so
the orchestrator can tell it to resume or to abandon. A second job_submit for a job
already taken here is never run twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from tunefleet.agent.executor import (
    EventCallback,
    ExecutorEvent,
    JobOutcome,
    JobSpec,
    JobStarted,
    LogBatch,
    ProgressReported,
)
from tunefleet.agent.job_submit import job_spec
from tunefleet.agent.outbox import Outbox, Report
from tunefleet.fsm.worker import WORKER_LIFECYCLE, WorkerFsmMixin, WorkerState
from tunefleet.protocol.events import JobSubmitEvent, read_event
from tunefleet.protocol.status import ReportedStatus

log = structlog.get_logger(__name__)


class Executor(Protocol):
    async def run(self, spec: JobSpec, on_event: EventCallback) -> JobOutcome: ...
    async def cancel(self, reason: str = ..., preempt_grace_s: float | None = None) -> None: ...


class AgentLifecycle(WorkerFsmMixin):
    """The agent's side of the worker lifecycle. ``current_job_id`` is the job whose
    process runs here (the FSM's "has a job"), not one whose last report is pending."""

    __slots__ = ("current_job_id", "drain_requested", "state", "worker_id")

    def __init__(self) -> None:
        self.worker_id = ""
        self.state: str = WorkerState.CONNECTING
        self.drain_requested = False
        self.current_job_id: str | None = None

    def fire(self, event: str) -> None:
        """Fire when the table allows it from here; a no-op otherwise (the agent's view
        follows the orchestrator's, which may have moved first)."""
        if WORKER_LIFECYCLE.can_fire(self, event):
            WORKER_LIFECYCLE.fire(self, event)


@dataclass(slots=True, eq=False)
class ActiveJob:
    spec: JobSpec
    task: asyncio.Task[None] | None = None
    progress: dict[str, Any] | None = None
    cancel_reason: str | None = None
    abandoned: bool = False

    @property
    def job_id(self) -> str:
        return self.spec.job_id


class JobSlot:
    """``on_free()`` is called when the slot has nothing left to do for its last job
    (final report delivered, or the job abandoned). ``is_stopping()`` says whether the
    agent is on its way out (it then takes no job)."""

    def __init__(
        self,
        executor: Executor,
        outbox: Outbox,
        lifecycle: AgentLifecycle,
        *,
        base_url: str,
        one_job_only: bool,
        on_free: Callable[[], None],
        is_stopping: Callable[[], bool],
    ) -> None:
        self.executor = executor
        self.outbox = outbox
        self.lifecycle = lifecycle
        self.base_url = base_url
        self.one_job_only = one_job_only
        self.on_free = on_free
        self.is_stopping = is_stopping
        self.running: ActiveJob | None = None
        self.held: str | None = None  # ended here; its final report not yet delivered
        self._held_attempt: int | None = None
        self.accepted = 0  # jobs taken, abandoned ones included
        self.finished = 0  # jobs that ran to an outcome reported here
        self._attempts_seen: set[tuple[str, int]] = set()
        # A job_submit that arrived while an abandoned job's process was still stopping.
        self._next: JobSubmitEvent | None = None
        self._cancels: set[asyncio.Task[None]] = set()

    @property
    def current_job_id(self) -> str | None:
        return self.running.job_id if self.running is not None else self.held

    @property
    def progress(self) -> dict[str, Any] | None:
        return self.running.progress if self.running is not None else None

    @property
    def empty(self) -> bool:
        return self.running is None and self.held is None

    # --- orders from the stream ---------------------------------------------------------

    def take(self, payload: dict[str, Any] | JobSubmitEvent) -> bool:
        """Start the job a job_submit describes, unless it must be ignored (logged)."""
        event = (
            payload if isinstance(payload, JobSubmitEvent) else read_event(JobSubmitEvent, payload)
        )
        if event is None:
            log.warning("ignoring a job_submit without a job_id")
            return False
        job_id, attempt = event.job_id, event.attempt
        running = self.running
        if running is not None and running.abandoned:
            # The orchestrator gave us a job while the abandoned one is still stopping (often
            # the same job, dispatched again): take it as soon as the slot is free.
            log.info("job_submit waits for the abandoned job to stop", job_id=job_id)
            self._next = event
            return False
        refusal = self._refusal(job_id, attempt)
        if refusal is not None:
            log.log(refusal[0], "ignoring job_submit", job_id=job_id, reason=refusal[1])
            return False
        if self.lifecycle.state == WorkerState.DRAINING:
            # An orchestrator dispatches to a draining worker only once the drain is lifted.
            log.warning("job dispatched while draining: the drain was lifted", job_id=job_id)
            self.lifecycle.fire("resume")
        job = ActiveJob(spec=job_spec(event, self.base_url))
        self.lifecycle.fire("assign")
        self.lifecycle.current_job_id = job_id
        self.running = job
        self.accepted += 1
        self._attempts_seen.add((job_id, attempt))
        log.info("job accepted", job_id=job_id, attempt=attempt)
        # The first report acknowledges the dispatch; every report names its attempt.
        self.outbox.add_status(job_id, ReportedStatus.STARTING, attempt=attempt)
        job.task = asyncio.create_task(self._run(job), name=f"job-{job_id}")
        return True

    def _refusal(self, job_id: str, attempt: int) -> tuple[int, str] | None:
        """Why a job_submit is not taken (log level, reason), or None to take it."""
        if self.running is not None:
            if self.running.job_id == job_id:
                return logging.INFO, "this job is already running here"
            return logging.WARNING, f"busy with job {self.running.job_id}"
        if (job_id, attempt) in self._attempts_seen:
            return logging.INFO, f"attempt {attempt} of this job already ran here"
        if self.is_stopping():
            return logging.INFO, "the agent is stopping"
        if self.one_job_only and (self.finished or self.held is not None):
            return logging.INFO, "an ephemeral worker runs one job"
        if self.lifecycle.state not in (WorkerState.IDLE, WorkerState.DRAINING):
            return logging.WARNING, f"the worker is {self.lifecycle.state}"
        return None

    async def cancel(
        self, job_id: object, reason: str, preempt_grace_s: float | None = None
    ) -> bool:
        """Stop the running job if it is ``job_id``; it is then reported cancelled.
        ``preempt_grace_s``: a preemption, whose trainer has that long to checkpoint."""
        job = self.running
        if self._next is not None and self._next.job_id == job_id:
            self._next = None  # cancelled before it could start: never acknowledged
        if job is None or job.job_id != job_id:
            log.info("job_cancel for a job not running here", job_id=job_id)
            return False
        if job.cancel_reason is None:
            job.cancel_reason = reason
            await self.executor.cancel(reason, preempt_grace_s)
        return True

    def abandon(self, job_id: str, reason: str, attempt: int | None = None) -> None:
        """The job (only that attempt of it, when one is given) is no longer this worker's:
        stop it here and report nothing more on it. A refusal of an earlier attempt's
        report leaves a newer attempt of the same job, dispatched here since, running."""
        self.outbox.drop_job(job_id, attempt)
        job = self.running
        if job is not None and job.job_id == job_id and attempt not in (None, job.spec.attempt):
            log.info(
                "an earlier attempt was refused; the running attempt goes on",
                job_id=job_id,
                refused_attempt=attempt,
                running_attempt=job.spec.attempt,
            )
        elif job is not None and job.job_id == job_id:
            log.warning("abandoning the running job", job_id=job_id, reason=reason)
            job.abandoned = True
            # Not ours any more: if the orchestrator sends it here again, run it again.
            self._attempts_seen.discard((job_id, job.spec.attempt))
            job.cancel_reason = job.cancel_reason or f"abandoned: {reason}"
            task = asyncio.create_task(self.executor.cancel(job.cancel_reason))
            self._cancels.add(task)
            task.add_done_callback(self._cancels.discard)
            return
        if self.held == job_id and attempt in (None, self._held_attempt):
            self.held = None
            self.on_free()

    def settled(self, report: Report) -> None:
        """The outbox delivered (or gave up on) a report."""
        if report.final and report.job_id == self.held and report.attempt == self._held_attempt:
            self.held = None
            self.on_free()

    # --- running ----------------------------------------------------------------------

    async def _run(self, job: ActiveJob) -> None:
        outcome: JobOutcome
        if job.cancel_reason is not None:  # cancelled before the executor got it
            outcome = JobOutcome(ReportedStatus.CANCELLED, None, job.cancel_reason, [])
        else:
            try:
                outcome = await self.executor.run(job.spec, self._event_handler(job))
            except Exception as error:  # the executor's own failure must still end the job
                log.exception("executor failed", job_id=job.job_id)
                outcome = JobOutcome(
                    ReportedStatus.FAILED, None, f"worker agent error: {error!r}", []
                )
        self.running = None
        self.lifecycle.current_job_id = None
        self.lifecycle.fire("release")
        log.info(
            "job ended",
            job_id=job.job_id,
            status=outcome.status,
            exit_code=outcome.exit_code,
            abandoned=job.abandoned,
        )
        if job.abandoned:
            waiting, self._next = self._next, None
            if waiting is None or not self.take(waiting):
                self.on_free()
            return
        self.finished += 1
        why = outcome.error or (
            job.cancel_reason if outcome.status == ReportedStatus.CANCELLED else None
        )
        self.outbox.add_status(
            job.job_id,
            outcome.status,
            attempt=job.spec.attempt,
            progress=job.progress,
            error=why,
            outputs=outcome.outputs,
        )
        self.held, self._held_attempt = job.job_id, job.spec.attempt

    def _event_handler(self, job: ActiveJob) -> EventCallback:
        async def on_event(event: ExecutorEvent) -> None:
            if job.abandoned or job is not self.running:
                return  # abandoned, or a straggler after the outcome: nothing to report
            if isinstance(event, JobStarted):
                log.info("job process started", job_id=job.job_id, pid=event.pid)
                self.outbox.add_status(
                    job.job_id,
                    ReportedStatus.RUNNING,
                    attempt=job.spec.attempt,
                    resumed_from=event.resumed_from,
                )
            elif isinstance(event, ProgressReported):
                job.progress = event.progress
                self.outbox.add_progress(job.job_id, event.progress, attempt=job.spec.attempt)
            elif isinstance(event, LogBatch):
                self.outbox.add_logs(job.job_id, job.spec.attempt, event.lines)

        return on_event
