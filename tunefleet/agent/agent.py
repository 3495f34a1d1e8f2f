"""The worker agent: register, read the job stream, run jobs, heartbeat, reconnect, stop.

Three long-lived tasks, watched together (the first to end stops the whole cleanly):
the connection (register, then read the stream; on loss, back off and register again),
the heartbeat loop (nothing else can delay it: not a silent trainer, not a flooding
one, not a slow report), and the report sender (the outbox, in order). A job runs on
its own task through the JobExecutor; its reports go through the outbox, so a job
keeps running while the orchestrator is away and its reports arrive after it returns.

The agent's own view of its lifecycle is the worker state machine of fsm/ (connecting,
idle, busy, draining, offline); the orchestrator keeps the authoritative one.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

from tunefleet import __version__
from tunefleet.agent.backoff import Backoff
from tunefleet.agent.client import (
    NOT_AN_ORCHESTRATOR_STRIKES,
    AgentError,
    InvalidToken,
    NotAnOrchestrator,
    NotAnOrchestratorGiveUp,
    OrchestratorUnreachable,
    Registration,
    RequestRejected,
    StreamLost,
    WorkerClient,
)
from tunefleet.agent.gpu import GpuInventory, GpuSample
from tunefleet.agent.identity import reconcile, reconnect_limit_s
from tunefleet.agent.job_slot import AgentLifecycle, Executor, JobSlot
from tunefleet.agent.outbox import Outbox, ReportSender
from tunefleet.agent.settings import AgentSettings
from tunefleet.agent.tasks import cancel_task, first_error
from tunefleet.fsm.worker import WorkerState
from tunefleet.protocol.endpoints import HeartbeatRequest, RegisterRequest
from tunefleet.protocol.events import JobCancelEvent, ShutdownEvent, read_event
from tunefleet.protocol.sse import SseEvent, decode_event
from tunefleet.protocol.tls import client_ssl_context

log = structlog.get_logger(__name__)

Sleep = Callable[[float], Awaitable[None]]
_GPU_SAMPLE_TIMEOUT_S = 5.0
_DISCONNECT_TIMEOUT_S = 5.0


class GpuReader(Protocol):
    def inventory(self) -> GpuInventory: ...
    def sample(self) -> GpuSample: ...


class Agent:
    def __init__(
        self,
        settings: AgentSettings,
        *,
        executor: Executor,
        gpu: GpuReader,
        client: WorkerClient | None = None,
        sleep: Sleep = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.gpu = gpu
        self.client = client or WorkerClient(
            settings.urls,
            settings.worker_token,
            tls=client_ssl_context(settings.ca_cert, settings.verify_tls),
            request_timeout_s=settings.request_timeout_s,
            ca_cert=settings.ca_cert,
        )
        self.sleep = sleep
        self.monotonic = monotonic
        self.lifecycle = AgentLifecycle()
        self.outbox = Outbox()
        self.online = asyncio.Event()
        self.last_event_id: str | None = None
        self.registrations = 0
        self.heartbeats_sent = 0
        self.inventory = GpuInventory()
        self._rng = rng or random.Random()
        # The administrator's worker_type wins once the orchestrator says it (identity.py).
        self.persistent = settings.persistent
        self._noted: set[str] = set()
        self._stop_reason: str | None = None
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self.jobs = JobSlot(
            executor,
            self.outbox,
            self.lifecycle,
            base_url=settings.orchestrator_url,
            one_job_only=not settings.persistent,
            on_free=self._leave_if_ephemeral_done,
            is_stopping=self._stop.is_set,
        )
        self._unreachable_since: float | None = None
        self._resync = asyncio.Event()  # the orchestrator thinks we are offline: register again
        self._sender = ReportSender(
            self.outbox,
            self.client,
            online=self.online,
            backoff=self._backoff(),
            sleep=sleep,
            on_abandon=self.jobs.abandon,
            on_settled=self.jobs.settled,
        )

    # --- what others may read ----------------------------------------------------------

    @property
    def state(self) -> str:
        return self.lifecycle.state

    @property
    def worker_id(self) -> str | None:
        return self.lifecycle.worker_id or None

    @property
    def current_job_id(self) -> str | None:
        """The job this worker holds: running here, or ended with its report pending."""
        return self.jobs.current_job_id

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # --- stopping ------------------------------------------------------------------------

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop cleanly: end the job (reported cancelled), deliver reports, disconnect."""
        if not self._stop.is_set():
            self._stop_reason = reason
            log.info("worker agent stopping", reason=reason)
            self._stop.set()

    def handle_signal(self, signame: str) -> None:
        """SIGTERM/SIGINT: the first stops cleanly, a second one stops without waiting."""
        if self._stop.is_set():
            log.warning("second signal: stopping now without waiting", signal=signame)
            self._force.set()
            return
        self.request_stop(f"worker agent stopped by {signame}")

    # --- the supervised whole -----------------------------------------------------------

    async def run(self) -> None:
        """Run until stopped, shut down, or (ephemeral) the job is done. Raises the
        AgentError that made it stop (InvalidToken, TlsVerificationFailed, ...)."""
        log.info(
            "worker agent starting",
            name=self.settings.name,
            orchestrator=",".join(self.settings.urls),
            persistent=self.settings.persistent,
            version=__version__,
        )
        self.inventory = await asyncio.to_thread(self.gpu.inventory)
        connection = asyncio.create_task(self._connection_loop(), name="agent-connection")
        heartbeat = asyncio.create_task(self._heartbeat_loop(), name="agent-heartbeat")
        sender = asyncio.create_task(self._sender.run(), name="agent-reports")
        stop = asyncio.create_task(self._stop.wait(), name="agent-stop")
        tasks = (connection, heartbeat, sender, stop)
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self._stop_reason = self._stop_reason or "worker agent task cancelled"
            self._force.set()
            await self._shutdown(tasks, fatal=asyncio.CancelledError())
            raise
        fatal = first_error(done)
        # AgentErrors carry their own message, which the command line prints.
        if fatal is not None and not isinstance(fatal, AgentError):
            log.error("worker agent failed", error=repr(fatal))
        await self._shutdown(tasks, fatal)
        if fatal is not None:
            raise fatal

    async def _shutdown(
        self, tasks: tuple[asyncio.Task[Any], ...], fatal: BaseException | None
    ) -> None:
        connection, heartbeat, sender, stop = tasks
        reason = self._stop_reason or str(fatal or "stopping")
        self._stop.set()
        self.lifecycle.fire("drain")  # take nothing new while the job ends
        await cancel_task(connection)
        deadline = self.monotonic() + self.settings.stop_timeout_s
        job = self.jobs.running
        if job is not None and job.task is not None:
            await self.jobs.cancel(job.job_id, reason)
            if not await self._wait(job.task, deadline):
                await asyncio.wait({job.task})  # cancelled: the executor kills the group
        if fatal is None and self.online.is_set():
            await self._wait(asyncio.ensure_future(self.outbox.wait_empty()), deadline)
        for task in (heartbeat, sender, stop):
            await cancel_task(task)
        if len(self.outbox):
            log.warning("reports not delivered", count=len(self.outbox), reason=reason)
        if fatal is None and self.online.is_set() and self.worker_id:
            with contextlib.suppress(InvalidToken, OrchestratorUnreachable, RequestRejected):
                await self.client.disconnect(self.worker_id, timeout_s=_DISCONNECT_TIMEOUT_S)
        self.online.clear()
        self.lifecycle.fire("lose")
        await self.client.close()
        log.info("worker agent stopped", reason=reason)

    async def _wait(self, task: asyncio.Future[Any], deadline: float) -> bool:
        """Wait for ``task`` until the deadline or a forced stop; True when it finished."""
        force = asyncio.ensure_future(self._force.wait())
        try:
            timeout = max(0.0, deadline - self.monotonic())
            await asyncio.wait({task, force}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            force.cancel()
        if not task.done():
            task.cancel()
            return False
        return True

    # --- connection ----------------------------------------------------------------------

    async def _connection_loop(self) -> None:
        backoff = self._backoff()
        strikes = 0  # answers in a row that were not an orchestrator's
        while True:
            try:
                registration = await self.client.register(self._register_body())
            except (OrchestratorUnreachable, RequestRejected) as error:
                strikes = strikes + 1 if isinstance(error, NotAnOrchestrator) else 0
                if strikes >= NOT_AN_ORCHESTRATOR_STRIKES:
                    raise NotAnOrchestratorGiveUp(str(error)) from error
                await self._wait_to_reconnect(backoff, error)
                continue
            strikes = 0
            self._on_registered(registration)
            try:
                await self._read_until_resync(registration, backoff)
            except (OrchestratorUnreachable, RequestRejected) as error:
                self._on_lost(error)
                await self._wait_to_reconnect(backoff, error)

    def _register_body(self) -> dict[str, Any]:
        # Built, not validated: bounds are the orchestrator's to enforce, with a 400 that
        # says what to change, and the agent must never fail before it can hear that.
        request = RegisterRequest.model_construct(
            name=self.settings.name,
            persistent=self.settings.persistent,
            provider=None,
            labels=dict(self.settings.labels),
            current_job_id=self.current_job_id,
            hostname=self.settings.hostname,
            agent="tunefleet",
            agent_version=__version__,
        )
        if self.settings.allowed_commands is not None:
            request.allowed_commands = list(self.settings.allowed_commands)
        return {
            **request.model_dump(exclude_unset=True),
            **self.inventory.register_fields(),
        }

    def _on_registered(self, registration: Registration) -> None:
        identity = reconcile(self.settings, registration)
        self.persistent = identity.persistent
        self.jobs.one_job_only = not identity.persistent
        for note in identity.notes:
            if note not in self._noted:
                self._noted.add(note)
                log.warning(note)
        self.lifecycle.worker_id = registration.worker_id
        # Jobs from now on come from this orchestrator: relative endpoints are its.
        self.jobs.base_url = self.client.base_url
        self.registrations += 1
        self._unreachable_since = None
        self._resync.clear()
        if registration.abandon_job:
            self.jobs.abandon(
                registration.abandon_job, "the orchestrator no longer assigns it here"
            )
        if registration.resume_job:
            resumed = registration.resume_job.get("job_id")
            log.info("orchestrator resumes the job held here", job_id=resumed)
            if resumed != self.current_job_id:
                log.warning("resume names a job this worker does not hold", job_id=resumed)
        self.lifecycle.fire("register")
        self.online.set()
        log.info(
            "registered",
            worker_id=registration.worker_id,
            state=self.state,
            current_job_id=self.current_job_id,
            last_event_id=self.last_event_id,
        )

    async def _read_until_resync(self, registration: Registration, backoff: Backoff) -> None:
        """Read the stream until it is lost or a heartbeat learns we are offline."""
        reader = asyncio.create_task(self._read_stream(registration, backoff))
        resync = asyncio.create_task(self._resync.wait())
        try:
            await asyncio.wait({reader, resync}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            resync.cancel()
            reader.cancel()
            await asyncio.wait({reader})
        error = None if reader.cancelled() else reader.exception()
        if error is not None:
            raise error
        raise StreamLost("the orchestrator considers this worker offline; registering again")

    async def _read_stream(self, registration: Registration, backoff: Backoff) -> None:
        events = self.client.stream(
            registration.sse_url, self.last_event_id, self.settings.stream_timeout_s
        )
        async with contextlib.aclosing(events):
            async for event in events:
                backoff.reset()  # the stream works; the next loss starts over from the base
                await self._on_event(event)
                if event.id is not None:
                    self.last_event_id = event.id

    def _on_lost(self, error: Exception) -> None:
        self.online.clear()
        self.lifecycle.fire("lose")
        log.warning(
            "lost the orchestrator; any running job continues",
            error=str(error),
            job_id=self.current_job_id,
        )

    async def _wait_to_reconnect(self, backoff: Backoff, error: Exception) -> None:
        now = self.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
        limit = reconnect_limit_s(self.settings, self.persistent)
        gone_too_long = limit is not None and now - self._unreachable_since >= limit
        if gone_too_long and self.jobs.running is None:
            raise error  # an ephemeral worker stops paying for an orchestrator that is gone
        delay = backoff.next_delay()
        if self.client.untried_url:
            # Moved to another orchestrator (a standby taking over): try it soon, spread
            # over a second so that a whole fleet does not arrive in one instant.
            delay = min(delay, self._rng.uniform(0.0, self.settings.backoff_base_s))
        hint = self.client.retry_after_s
        if hint is not None:
            # A standby said when to ask again (it takes over within seconds): follow it,
            # jittered, rather than a back-off that has grown meanwhile.
            delay = min(delay, self._rng.uniform(0.5, 1.0) * max(hint, 0.1))
        if self.jobs.running is not None or self.jobs.held is not None:
            # A job in hand: try at least as often as heartbeats go, so a restarted
            # orchestrator hears from us before its heartbeat deadline and does not
            # give the job to another worker.
            delay = min(delay, self.settings.heartbeat_interval_s)
        log.warning(
            "will reconnect to the orchestrator", error=str(error), retry_in_s=round(delay, 2)
        )
        await self.sleep(delay)

    def _backoff(self) -> Backoff:
        s = self.settings
        return Backoff(s.backoff_base_s, max(s.backoff_max_s, s.backoff_base_s), rng=self._rng)

    # --- stream events -------------------------------------------------------------------

    async def _on_event(self, event: SseEvent) -> None:
        decoded = decode_event(event)
        if decoded is None:
            log.warning("ignoring an event that is not a JSON object", data=event.data[:200])
            return
        kind, payload = decoded
        if kind == "ping":
            return
        log.debug("event", type=kind, id=event.id)
        if kind == "job_submit":
            self.jobs.take(payload)
        elif kind == "job_cancel":
            cancel = read_event(JobCancelEvent, payload)
            if cancel is None:
                log.info("ignoring a job_cancel without a job_id")
                return
            reason = cancel.reason or "cancelled by the orchestrator"
            grace = cancel.grace_seconds if cancel.preempt else None
            await self.jobs.cancel(cancel.job_id, reason, grace)
        elif kind == "drain":
            self._on_drain()
        elif kind == "shutdown":
            shutdown = read_event(ShutdownEvent, payload) or ShutdownEvent()
            why = shutdown.reason
            self.request_stop(f"the orchestrator asked this worker to shut down: {why}")
        else:
            log.debug("ignoring an unknown event type", type=kind)

    def _on_drain(self) -> None:
        if self.state != WorkerState.DRAINING:
            self.lifecycle.fire("drain")
            log.info("draining: the current job finishes, no new job is taken")
        self._leave_if_ephemeral_done(drained=True)

    def _leave_if_ephemeral_done(self, drained: bool = False) -> None:
        """An ephemeral worker leaves once its one job is over and reported; drained,
        it leaves at once when it has none."""
        if self.persistent or not self.jobs.empty:
            return
        if self.jobs.accepted:
            self.request_stop("ephemeral worker finished its job")
        elif drained:
            self.request_stop("ephemeral worker drained before it got a job")

    # --- heartbeats ------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = self.settings.heartbeat_interval_s
        while True:
            await self.online.wait()
            started = self.monotonic()
            await self._send_heartbeat()
            await self.sleep(max(0.0, interval - (self.monotonic() - started)))

    async def _send_heartbeat(self) -> None:
        sample = await self._gpu_sample()
        body = HeartbeatRequest.model_construct(
            worker_id=self.lifecycle.worker_id,
            status=self.state,
            current_job_id=self.current_job_id,
            job_progress=self.jobs.progress,
            gpu_utilization=sample.utilization_pct,
            vram_used_gb=sample.memory_used_gb,
        ).model_dump()
        timeout = min(self.settings.request_timeout_s, max(self.settings.heartbeat_interval_s, 1.0))
        try:
            await self.client.heartbeat(body, timeout_s=timeout)
        except RequestRejected as error:
            log.warning("heartbeat refused", status=error.status, detail=error.detail)
            if error.status == 409:  # "worker is offline; register again"
                self._resync.set()
            return
        except OrchestratorUnreachable as error:
            log.info("heartbeat not delivered", error=str(error))
            return
        self.heartbeats_sent += 1

    async def _gpu_sample(self) -> GpuSample:
        # NVML calls block; in a thread, and bounded, so a stuck driver cannot hold us.
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(self.gpu.sample), timeout=_GPU_SAMPLE_TIMEOUT_S
            )
        except TimeoutError:
            log.warning("gpu sample timed out", timeout_s=_GPU_SAMPLE_TIMEOUT_S)
            return GpuSample([], [])
