"""The local runner's two executors, and which one a job gets.

One runs trainers as the orchestrator's own user, the other isolated as the runner user;
a job gets the one its submission earned (``JobRecord.local_unisolated``, read back from
storage, so the choice needs no principal and outlives a restart) under the flags the
orchestrator runs with now (``LocalIsolation.runs_unisolated``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import structlog

from tunefleet.actors.local_isolation import LocalIsolation
from tunefleet.agent.job_events import EventCallback, JobOutcome, JobSpec
from tunefleet.protocol.events import DEFAULT_CANCEL_REASON
from tunefleet.protocol.status import ReportedStatus

log = structlog.get_logger(__name__)


class TrainerRunner(Protocol):
    """What the local runner needs of an executor (JobExecutor, or these two)."""

    @property
    def allowed_commands(self) -> tuple[str, ...] | None: ...

    async def run(self, spec: JobSpec, on_event: EventCallback) -> JobOutcome: ...

    async def cancel(self, reason: str = ..., preempt_grace_s: float | None = None) -> None: ...


class LocalExecutors:
    def __init__(
        self,
        isolation: LocalIsolation,
        *,
        own_user: TrainerRunner | None,
        isolated: TrainerRunner | None,
        recorded_unisolated: Callable[[str], Awaitable[bool]],
        allowed_commands: Sequence[str] | None,
    ) -> None:
        self.isolation = isolation
        self._own_user = own_user
        self._isolated = isolated
        self._recorded_unisolated = recorded_unisolated
        self._allowed_commands = tuple(allowed_commands) if allowed_commands is not None else None
        self._current: TrainerRunner | None = None
        self._cancelled: str | None = None  # a cancel that came while the choice was made

    @property
    def allowed_commands(self) -> tuple[str, ...] | None:
        return self._allowed_commands

    async def run(self, spec: JobSpec, on_event: EventCallback) -> JobOutcome:
        try:
            choice = self.isolation.runs_unisolated(await self._recorded_unisolated(spec.job_id))
            if self._cancelled is not None:
                return JobOutcome(ReportedStatus.CANCELLED, None, self._cancelled, [])
            executor = self._own_user if choice is True else self._isolated
            if isinstance(choice, str) or executor is None:
                why = choice if isinstance(choice, str) else "it has no executor here"
                log.warning("local job refused", job_id=spec.job_id, reason=why)
                error = f"refused by this worker: {why}"
                return JobOutcome(ReportedStatus.FAILED, None, error, [])
            log.info("local job starts", job_id=spec.job_id, unisolated=choice)
            self._current = executor
            return await executor.run(spec, on_event)
        finally:
            self._current = None
            self._cancelled = None

    async def cancel(
        self, reason: str = DEFAULT_CANCEL_REASON, preempt_grace_s: float | None = None
    ) -> None:
        if self._current is None:
            self._cancelled = reason
            return
        await self._current.cancel(reason, preempt_grace_s)
