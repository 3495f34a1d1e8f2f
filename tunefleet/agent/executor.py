"""Running one training job as a process group and reporting what it does.

The job contract (files, environment, progress lines, exit codes, cancellation) is
written for trainer authors in docs/job-contract.md; this module keeps it.
One executor runs one job at a time, so a GPU is never shared by two jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import structlog

from tunefleet.agent.job_artifacts import ArtifactOptions, JobArtifacts, plan_config
from tunefleet.agent.job_events import (
    ArtifactPlan,
    EventCallback,
    ExecutorEvent,
    JobOutcome,
    JobSpec,
    JobStarted,
    JobStatus,
    LogBatch,
    LogLine,
    ProgressReported,
)
from tunefleet.agent.job_files import (
    JobFiles,
    JobSetupError,
    RunAs,
    chosen_command,
    hand_over,
    job_environment,
    output_path,
    prepare_job_dir,
    resolve_command,
    update_config,
)
from tunefleet.agent.output import EventForwarder, OutputCapture
from tunefleet.agent.progress import ProgressTail
from tunefleet.agent.uploads import UploadRefused
from tunefleet.commands import refusal
from tunefleet.errors import TunefleetError
from tunefleet.protocol.endpoints import OutputsReport
from tunefleet.protocol.events import DEFAULT_CANCEL_REASON
from tunefleet.protocol.fields import LogStream
from tunefleet.protocol.status import ReportedStatus

__all__ = [
    "ArtifactPlan",
    "EventCallback",
    "ExecutorBusy",
    "ExecutorEvent",
    "JobExecutor",
    "JobOutcome",
    "JobSpec",
    "JobStarted",
    "JobStatus",
    "LogBatch",
    "LogLine",
    "ProgressReported",
]

log = structlog.get_logger(__name__)

# After the main process exits, how long its pipes may stay open before the
# stragglers holding them are ignored (they were already sent SIGKILL).
_DRAIN_TIMEOUT_S = 5.0
# How often the main process's exit is checked while its pipes are still open.
_EXIT_POLL_S = 0.5
T = TypeVar("T")


class _Interrupted(Exception):
    """A cancel arrived while the attempt restored or stored its artifacts."""


class ExecutorBusy(TunefleetError):
    """`run()` was called while another job is still running."""

    status = 409


class JobExecutor:
    """Runs jobs one at a time under `<work_dir>/jobs/<job_id>/attempt-<n>/`."""

    def __init__(
        self,
        work_dir: Path | str,
        default_command: Sequence[str] | str,
        *,
        grace_s: float = 10.0,
        allowed_commands: Sequence[str] | None = None,
        run_as: RunAs | None = None,
        base_env: Mapping[str, str] | None = None,
        withheld_secrets: Sequence[str] = (),
        cuda_visible_devices: str | None = None,
        log_batch_lines: int = 200,
        log_interval_s: float = 0.5,
        max_pending_lines: int = 5_000,
        progress_poll_s: float = 0.25,
        max_line_bytes: int = 8 * 1024,
        tail_lines: int = 20,
        artifacts: ArtifactOptions | None = None,
    ) -> None:
        # Absolute: the trainer runs in its job directory and is given paths under this.
        self.work_dir = Path(os.path.abspath(Path(work_dir).expanduser()))
        self.default_command = (
            shlex.split(default_command)
            if isinstance(default_command, str)
            else list(default_command)
        )
        self.grace_s = grace_s
        # None: any command (an embedding that checks elsewhere); `tunefleet worker` and
        # the local runner always pass their allowed commands.
        self.allowed_commands = tuple(allowed_commands) if allowed_commands is not None else None
        # The local runner's isolation: trainers as another user, with a scrubbed env.
        self.run_as = run_as
        self.base_env = dict(base_env) if base_env is not None else None
        # The agent's own secrets (its worker token): no variable holding one reaches a job.
        self.withheld_secrets = tuple(withheld_secrets)
        self.cuda_visible_devices = cuda_visible_devices
        self.log_batch_lines = log_batch_lines
        self.log_interval_s = log_interval_s
        self.max_pending_lines = max_pending_lines
        self.progress_poll_s = progress_poll_s
        self.max_line_bytes = max_line_bytes
        self.tail_lines = tail_lines
        self.artifacts = artifacts or ArtifactOptions()
        self._attempt: _Attempt | None = None

    @property
    def busy(self) -> bool:
        return self._attempt is not None

    @property
    def current_job_id(self) -> str | None:
        return self._attempt.spec.job_id if self._attempt is not None else None

    async def run(self, spec: JobSpec, on_event: EventCallback) -> JobOutcome:
        """Run the job to its end; every failure of the job is an outcome, not an exception.

        Cancelling the task that awaits this kills the job's process group at once
        (the "stop now" shutdown); `cancel()` is the graceful way.
        """
        if self._attempt is not None:
            raise ExecutorBusy(
                f"already running job {self._attempt.spec.job_id}; "
                f"cannot start {spec.job_id} until it ends or is cancelled"
            )
        attempt = _Attempt(self, spec, on_event)
        self._attempt = attempt
        try:
            return await attempt.execute()
        finally:
            self._attempt = None

    async def cancel(
        self, reason: str = DEFAULT_CANCEL_REASON, preempt_grace_s: float | None = None
    ) -> None:
        """SIGTERM to the job's group now, SIGKILL after `grace_s`; `run()` returns cancelled.

        ``preempt_grace_s``: the job is preempted, and the trainer has that long (not
        `grace_s`) to write a checkpoint and exit; one that exits 0 within it completed.
        Returns at once; the escalation is done by the task running the job.
        """
        if self._attempt is None:
            log.debug("cancel with no job running", reason=reason)
            return
        self._attempt.request_cancel(reason, preempt_grace_s)


class _Attempt:
    """One run of one job: its process, its readers, its forwarder."""

    def __init__(self, executor: JobExecutor, spec: JobSpec, on_event: EventCallback) -> None:
        self.executor = executor
        self.spec = spec
        self.cancel_reason: str | None = None
        self._cancelled = asyncio.Event()
        self._preempt_grace_s: float | None = None  # set: the cancel is a preemption
        self._proc: asyncio.subprocess.Process | None = None
        self._storing = False  # the trainer exited; its outputs are being stored
        self._forwarder = EventForwarder(
            on_event,
            batch_lines=executor.log_batch_lines,
            interval_s=executor.log_interval_s,
            max_pending_lines=executor.max_pending_lines,
        )
        self._log = log.bind(job_id=spec.job_id, attempt=spec.attempt)

    def request_cancel(self, reason: str, preempt_grace_s: float | None = None) -> None:
        if self.cancel_reason is not None:
            return
        if self._proc is not None and self._proc.returncode is not None and not self._storing:
            # The main process already ended on its own: its exit decides the outcome.
            self._log.info("cancel after the job exited; outcome stands", reason=reason)
            return
        self.cancel_reason = reason
        self._preempt_grace_s = preempt_grace_s
        self._cancelled.set()
        self._log.info("cancelling job", reason=reason, preempt_grace_s=preempt_grace_s)
        self._signal_group(signal.SIGTERM)

    async def execute(self) -> JobOutcome:
        ex = self.executor
        plan = self.spec.artifacts
        config = plan_config(self.spec.config) if plan is not None else self.spec.config
        try:
            named = chosen_command(self.spec.command, ex.default_command)
        except JobSetupError as error:
            return JobOutcome(ReportedStatus.FAILED, None, str(error), [])
        refused = refusal(named, self.spec.env, ex.allowed_commands)
        if refused is not None:
            # Nothing is prepared or started: the job fails with the reason.
            self._log.warning("job refused", argv=named, reason=refused)
            return JobOutcome(ReportedStatus.FAILED, None, f"refused by this worker: {refused}", [])
        try:
            files = prepare_job_dir(
                ex.work_dir,
                self.spec.job_id,
                self.spec.attempt,
                config,
                self.spec.dataloader,
            )
            if ex.run_as is not None:
                hand_over(files, ex.run_as)
            argv = resolve_command(self.spec.command, ex.default_command)
            env = job_environment(
                files,
                self.spec.job_id,
                self.spec.attempt,
                self.spec.env,
                ex.cuda_visible_devices,
                base=ex.base_env,
                run_as=ex.run_as,
                withheld=ex.withheld_secrets,
            )
            log_file = files.log_path.open("a", encoding="utf-8")
        except (JobSetupError, OSError) as error:
            self._log.warning("job setup failed", error=str(error))
            return JobOutcome(ReportedStatus.FAILED, None, str(error), [])
        forwarding = asyncio.create_task(
            self._forwarder.run(), name=f"job-events-{self.spec.job_id}"
        )
        try:
            with log_file:
                capture = OutputCapture(
                    log_file,
                    self._forwarder,
                    max_line_bytes=ex.max_line_bytes,
                    tail_lines=ex.tail_lines,
                )
                if plan is None:
                    outcome = await self._supervise(files, argv, env, capture, None)
                else:
                    outcome = await self._with_artifacts(plan, config, files, argv, env, capture)
        except BaseException:
            forwarding.cancel()
            raise
        self._forwarder.close()
        await forwarding
        self._log.info("job ended", status=outcome.status, exit_code=outcome.exit_code)
        return outcome

    async def _with_artifacts(
        self,
        plan: ArtifactPlan,
        config: Mapping[str, Any],
        files: JobFiles,
        argv: list[str],
        env: dict[str, str],
        capture: OutputCapture,
    ) -> JobOutcome:
        """Restore the checkpoint to resume from, run, then store the outputs: a trainer
        that exits 0 is ``completed`` only once they are stored."""
        out = output_path(files, config)
        artifacts = JobArtifacts(plan, out, options=self.executor.artifacts, note=capture.inform)
        try:
            try:
                if await self._unless_cancelled(artifacts.restore()):
                    update_config(files, resume_from_checkpoint="latest")
            except _Interrupted:
                return JobOutcome(ReportedStatus.CANCELLED, None, self.cancel_reason, capture.tail)
            outcome = await self._supervise(files, argv, env, capture, artifacts)
            if outcome.status == ReportedStatus.CANCELLED:
                await self._store_last_checkpoint(artifacts)
                return outcome
            return await self._store_outputs(artifacts, outcome, capture)
        finally:
            await artifacts.close()

    async def _store_outputs(
        self, artifacts: JobArtifacts, outcome: JobOutcome, capture: OutputCapture
    ) -> JobOutcome:
        completed = outcome.status == ReportedStatus.COMPLETED
        self._storing = True
        try:
            outputs = await self._unless_cancelled(artifacts.finish(completed))
        except _Interrupted:
            return JobOutcome(
                ReportedStatus.CANCELLED, outcome.exit_code, self.cancel_reason, capture.tail
            )
        except UploadRefused as error:
            reason = f"outputs not stored: {error}"
            self._log.warning("outputs not stored", error=str(error))
            capture.inform(reason)
            if not completed:
                return outcome
            failed = OutputsReport.model_construct(stored=False, reason=reason).model_dump(
                exclude_unset=True
            )
            return JobOutcome(
                ReportedStatus.FAILED, outcome.exit_code, reason, capture.tail, failed
            )
        finally:
            self._storing = False
        if not completed:
            return outcome
        capture.inform(f"outputs stored: {outputs['keys']} files, {outputs['bytes']} bytes")
        return replace(outcome, outputs=outputs)

    async def _store_last_checkpoint(self, artifacts: JobArtifacts) -> None:
        """A cancelled trainer saved a checkpoint on SIGTERM: store it for the job's retry,
        within a bounded time (the store may be gone, the token revoked)."""
        limit = self.executor.artifacts.cancelled_upload_s
        try:
            await asyncio.wait_for(artifacts.finish(completed=False), limit)
        except (TimeoutError, UploadRefused) as error:
            self._log.info("checkpoint of a cancelled job not stored", error=str(error))

    async def _unless_cancelled(self, work: Awaitable[T]) -> T:
        """``work``'s result, or _Interrupted (with ``work`` cancelled) on a cancel."""
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self._cancelled.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if task.cancelled():
            raise _Interrupted()
        return task.result()

    async def _supervise(
        self,
        files: JobFiles,
        argv: list[str],
        env: dict[str, str],
        capture: OutputCapture,
        artifacts: JobArtifacts | None,
    ) -> JobOutcome:
        run_as = self.executor.run_as
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=files.job_dir,
                env=env,
                start_new_session=True,  # its own process group: signals reach all of it
                **(run_as.process_user() if run_as is not None else {}),  # type: ignore[arg-type]
            )
        except OSError as error:
            who = f" as user {run_as.name}" if run_as is not None else ""
            message = f"cannot start command {argv[0]!r}{who}: {error.strerror or error}"
            self._log.warning("job command could not start", argv=argv, error=str(error))
            capture.note(message)
            return JobOutcome(ReportedStatus.FAILED, None, message, capture.tail)
        self._proc = proc
        self._log.info("job started", pid=proc.pid, argv=argv, job_dir=str(files.job_dir))
        restored = artifacts.restored if artifacts is not None else None
        self._forwarder.send(JobStarted(proc.pid, files.job_dir, restored))
        if artifacts is not None:
            artifacts.start_watching()
        if self.cancel_reason is not None:
            self._signal_group(signal.SIGTERM)
        tail = ProgressTail(files.progress_path)
        pipes: list[tuple[LogStream, asyncio.StreamReader | None]] = [
            ("stdout", proc.stdout),
            ("stderr", proc.stderr),
        ]
        readers = [
            asyncio.create_task(capture.pump(name, pipe))
            for name, pipe in pipes
            if pipe is not None  # always set: both pipes were asked for
        ]
        following = asyncio.create_task(self._follow_progress(tail))
        try:
            returncode = await self._wait_exit(proc)
            # Whatever the job left running in its group must not hold the GPU.
            self._signal_group(signal.SIGKILL)
            _, still_reading = await asyncio.wait(readers, timeout=_DRAIN_TIMEOUT_S)
            if still_reading:
                self._log.warning("job output pipes stayed open after exit; not read further")
        finally:
            following.cancel()
            for reader in readers:
                reader.cancel()
            if proc.returncode is None:  # run() itself was cancelled: stop now
                self._signal_group(signal.SIGKILL)
            # Let asyncio close the process transport; bounded, as an escaped child
            # (one that left the process group) could hold a pipe open.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), _DRAIN_TIMEOUT_S)
        if tail.poll(final=True):
            self._forwarder.set_progress(tail.progress)
        if tail.malformed:
            self._log.warning("ignored malformed progress lines", count=tail.malformed)
            capture.note(f"{tail.malformed} progress lines were not JSON objects and were ignored")
        if returncode == 0 and self._preempt_grace_s is not None:
            # It finished within a preemption's grace: the job completed (its outputs are
            # stored as for any completion), there is nothing to resume.
            self._log.info("job completed within its preemption grace")
            self.cancel_reason, self._preempt_grace_s = None, None
            self._cancelled.clear()
        return self._outcome(returncode, capture)

    async def _follow_progress(self, tail: ProgressTail) -> None:
        while True:
            if tail.poll():
                self._forwarder.set_progress(tail.progress)
            await asyncio.sleep(self.executor.progress_poll_s)

    async def _wait_exit(self, proc: asyncio.subprocess.Process) -> int:
        """The main process's exit status, escalating a cancel to SIGKILL after grace_s.

        `proc.wait()` also waits for the pipes to close, which a leftover child can
        hold open forever, so the exit is read from `proc.returncode` as well.
        """
        loop = asyncio.get_running_loop()
        closed = asyncio.ensure_future(proc.wait())
        cancelled = asyncio.ensure_future(self._cancelled.wait())
        kill_at: float | None = None
        killed = False
        try:
            while proc.returncode is None:
                if kill_at is None and self._cancelled.is_set():
                    kill_at = loop.time() + self._grace_s
                if kill_at is not None and not killed and loop.time() >= kill_at:
                    self._log.warning("job ignored SIGTERM; killing it", grace_s=self._grace_s)
                    self._signal_group(signal.SIGKILL)
                    killed = True
                pause = _EXIT_POLL_S
                if kill_at is not None and not killed:
                    pause = max(0.0, min(pause, kill_at - loop.time()))
                wake = {closed} if cancelled.done() else {closed, cancelled}
                await asyncio.wait(wake, timeout=pause, return_when=asyncio.FIRST_COMPLETED)
            return proc.returncode
        finally:
            cancelled.cancel()
            closed.cancel()

    @property
    def _grace_s(self) -> float:
        """How long after SIGTERM the trainer may take to exit: a preemption's grace (to
        write a checkpoint), else the executor's."""
        grace = self._preempt_grace_s
        return grace if grace is not None else self.executor.grace_s

    def _signal_group(self, sig: signal.Signals) -> None:
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass  # the group is already gone
        except PermissionError as error:
            self._log.warning("cannot signal job", signal=sig.name, error=str(error))

    def _outcome(self, returncode: int, capture: OutputCapture) -> JobOutcome:
        tail = capture.tail
        if self.cancel_reason is not None:
            return JobOutcome(ReportedStatus.CANCELLED, returncode, self.cancel_reason, tail)
        if returncode == 0:
            return JobOutcome(ReportedStatus.COMPLETED, 0, None, tail)
        if returncode < 0:
            try:
                reason = f"killed by signal {signal.Signals(-returncode).name}"
            except ValueError:
                reason = f"killed by signal {-returncode}"
        else:
            reason = f"exit code {returncode}"
        last = capture.last_line()
        return JobOutcome(
            ReportedStatus.FAILED, returncode, f"{reason}: {last}" if last else reason, tail
        )
