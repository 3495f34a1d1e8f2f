"""The orchestrator process: builds the aiohttp application around the Fleet and runs it."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from tunefleet.actors.build import build_fleet
from tunefleet.actors.clock import Clock, RealClock
from tunefleet.actors.context import FleetSettings
from tunefleet.actors.events import EventHub
from tunefleet.actors.fair_share_state import FairShareSettings
from tunefleet.actors.fleet import Fleet
from tunefleet.actors.local_runner import LocalRunner, local_worker_record
from tunefleet.actors.quarantine_policy import (
    DEFAULT_QUARANTINE_AFTER,
    DEFAULT_QUARANTINE_WINDOW_S,
    QuarantineRule,
)
from tunefleet.agent.gpu import GpuProbe, probe_from_environment
from tunefleet.artifacts.backends import open_store
from tunefleet.artifacts.service import Artifacts
from tunefleet.audit import AuditLog
from tunefleet.disk_guard import DiskGuard
from tunefleet.errors import TunefleetError
from tunefleet.fsm.job import DEFAULT_INFRA_RETRIES
from tunefleet.http import keys, ui
from tunefleet.http.bootstrap import ensure_admin_token, standby_banner, startup_banner
from tunefleet.http.connections import NOSNIFF_HEADER, ConnectionGuard
from tunefleet.http.errors import put_request_id
from tunefleet.http.front_door import app_front_door
from tunefleet.http.gc_policy import gc_policy_ctx
from tunefleet.http.leadership import STEPPED_DOWN_EXIT_CODE, Leadership
from tunefleet.http.local_setup import local_executors, plan_local
from tunefleet.http.routes import build_routes
from tunefleet.http.serving import raise_open_file_limit, run_guarded
from tunefleet.http.tls import (
    ensure_self_signed,
    fingerprint,
    is_self_signed,
    server_ssl_context,
)
from tunefleet.jobconfigs import ConfigCatalog
from tunefleet.limits import Limits
from tunefleet.logging import configure_logging
from tunefleet.metrics import Metrics
from tunefleet.storage.database import open_database
from tunefleet.storage.leadership import DEFAULT_LEASE_S
from tunefleet.storage.process_lock import lock_sqlite_database
from tunefleet.storage.store import Store
from tunefleet.storage.urls import parse_database_url
from tunefleet.webhooks.events import TAKEOVER
from tunefleet.webhooks.outbox import WebhookOutbox
from tunefleet.webhooks.sender import WebhookSender

log = structlog.get_logger(__name__)


def absolute_path(path: Path) -> Path:
    """``~`` expanded and made absolute against the current directory (symlinks kept)."""
    return Path(os.path.abspath(path.expanduser()))


@dataclass(frozen=True, slots=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 8001
    use_ssl: bool = False
    ssl_cert: Path | None = None
    ssl_key: Path | None = None
    data_dir: Path = Path(".tunefleet")
    database_url: str | None = None
    configs_dir: Path = Path("configs")
    heartbeat_timeout: float = 120.0
    health_check_interval: float = 60.0
    dispatch_ack_timeout: float = 60.0
    reconnect_grace: float = 5.0
    preempt_grace: float = 120.0
    preempt_slack: float = 60.0
    ping_interval: float = 15.0
    max_retries: int = 3
    infra_retries: int = DEFAULT_INFRA_RETRIES
    quarantine_after: int = DEFAULT_QUARANTINE_AFTER
    quarantine_window: float = DEFAULT_QUARANTINE_WINDOW_S
    # Fair share (issue 25): standing's half-life in hours, reclaim's protection window.
    fair_share_half_life: float = 168.0
    min_runtime_before_preempt: float = 600.0
    priority_preemption: bool = False
    admin_token: str | None = None
    local_runner: bool = True
    local_train_command: str | None = None
    advertise_url: str | None = None
    artifact_store: str | None = None
    s3_endpoint_url: str | None = None
    keep_checkpoints: int = 3
    # Empty: the local train command, SimpleTuner's trainer and the example trainer.
    local_allowed_commands: tuple[str, ...] = ()
    # Isolation of local trainers (tunefleet/actors/local_isolation.py). None: nobody and
    # /var/tmp/tunefleet-local-runner (root's; -<uid> after it for anyone else's).
    local_runner_user: str | None = None
    local_work_dir: Path | None = None
    local_runner_unisolated: bool = False  # every local job as the orchestrator's user
    local_runner_isolated_only: bool = False  # none
    log_format: str = "console"
    verbose: bool = False
    leader_lease: float = DEFAULT_LEASE_S
    webhooks_allow_private: bool = False
    limits: Limits = field(default_factory=Limits)

    @classmethod
    def from_cli(cls, values: dict[str, Any]) -> ServerOptions:
        values = dict(values)
        limits = Limits.from_cli(values)
        return cls(**values, limits=limits).absolute()

    def absolute(self) -> ServerOptions:
        """Every path made absolute once, at start: a relative one (``make run``'s
        ``.tunefleet``) would otherwise be read from whatever directory a job runs in."""
        return replace(
            self,
            data_dir=absolute_path(self.data_dir),
            configs_dir=absolute_path(self.configs_dir),
            ssl_cert=absolute_path(self.ssl_cert) if self.ssl_cert else None,
            ssl_key=absolute_path(self.ssl_key) if self.ssl_key else None,
            local_work_dir=absolute_path(self.local_work_dir) if self.local_work_dir else None,
        )

    def fleet_settings(self) -> FleetSettings:
        return FleetSettings(
            heartbeat_timeout_s=self.heartbeat_timeout,
            health_check_interval_s=self.health_check_interval,
            dispatch_ack_timeout_s=self.dispatch_ack_timeout,
            reconnect_grace_s=self.reconnect_grace,
            preempt_grace_s=self.preempt_grace,
            preempt_slack_s=self.preempt_slack,
            ping_interval_s=self.ping_interval,
            default_max_retries=self.max_retries,
            infra_retries=self.infra_retries,
            quarantine=QuarantineRule(self.quarantine_after, self.quarantine_window),
            local_runner=self.local_runner,
            upload_endpoint="/api/artifacts",
            limits=self.limits,
            fair_share=FairShareSettings(
                half_life_s=self.fair_share_half_life * 3600,
                min_runtime_before_preempt_s=self.min_runtime_before_preempt,
                priority_preemption=self.priority_preemption,
            ),
        )

    @property
    def public_url(self) -> str:
        """Where workers reach this orchestrator: --advertise-url, else the listening
        address (this machine's name when it listens on every interface)."""
        if self.advertise_url:
            return self.advertise_url.rstrip("/")
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.getfqdn()
        if ":" in host:
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def scheme(self) -> str:
        return "https" if self.use_ssl else "http"

    @property
    def database_url_description(self) -> str:
        return parse_database_url(self.database_url, self.data_dir).description

    @property
    def trust_cert(self) -> Path | None:
        """The certificate clients must be told to trust (``--ca-cert``/``--cacert``):
        the served one when it is self-signed; None for plain HTTP or a CA-issued one."""
        if not (self.use_ssl and self.ssl_cert and self.ssl_cert.exists()):
            return None
        return self.ssl_cert if is_self_signed(self.ssl_cert) else None


def build_app(options: ServerOptions, clock: Clock | None = None) -> web.Application:
    """The application; storage, actors and the local runner live in its cleanup context,
    storage first so that it closes last."""
    door = app_front_door(keys.METRICS, keys.LEADERSHIP)
    app = web.Application(middlewares=[door], client_max_size=options.limits.max_body_bytes)
    app[keys.OPTIONS] = options.absolute()
    app[keys.CLOCK] = clock or RealClock()
    app[keys.BACKGROUND] = set()
    app.cleanup_ctx.append(_storage)
    app.cleanup_ctx.append(_fleet)
    app.on_shutdown.append(_close_streams)
    app.on_response_prepare.append(_response_prepared)
    build_routes(app)
    return app


async def _response_prepared(request: web.Request, response: web.StreamResponse) -> None:
    """The app's one ``on_response_prepare`` hook, as its headers are sent: the request
    id on a response its handler prepared itself (``errors.request_id_on_prepare``), and
    the UI's security and cache headers (``ui.ui_headers``). One hook, not one per duty:
    aiohttp awaits each on every response, every heartbeat's included (issue 14). And on
    every response, ``nosniff``: a browser must not read an artifact or an error as HTML
    (issue 23)."""
    response.headers[NOSNIFF_HEADER] = "nosniff"
    put_request_id(request, response)
    ui.put_ui_headers(request, response)


async def _storage(app: web.Application) -> AsyncIterator[None]:
    options = app[keys.OPTIONS]
    options.data_dir.mkdir(parents=True, exist_ok=True)
    config = parse_database_url(options.database_url, options.data_dir)
    # SQLite serves one process: a second server on the same file is refused up front.
    lock = lock_sqlite_database(config.sqlite_path) if config.sqlite_path else None
    try:
        db = await open_database(options.database_url, options.data_dir)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    # Stored timestamps come from the same clock as the actors' (a FakeClock in tests).
    app[keys.DATABASE] = db
    watched, owed = [options.data_dir], []
    if config.sqlite_path and config.sqlite_path != ":memory:":
        watched.append(Path(config.sqlite_path).parent)
        owed.append(Path(f"{config.sqlite_path}-wal"))  # a checkpoint copies it in again
    app[keys.DISK_GUARD] = DiskGuard(options.limits.min_free_disk, watched, owed=owed)
    app[keys.STORE] = Store(db, now=app[keys.CLOCK].time)
    app[keys.WEBHOOKS] = WebhookOutbox(options.public_url, now=app[keys.CLOCK].time)
    try:
        yield
    finally:
        await db.close()
        if lock is not None:
            lock.release()


async def _fleet(app: web.Application) -> AsyncIterator[None]:
    """The fleet runs while this process is the active orchestrator: at once on SQLite,
    on PostgreSQL once it holds the lease (at start, or on taking over from another)."""
    options = app[keys.OPTIONS]
    app[keys.METRICS] = Metrics()
    app[keys.HUB] = EventHub()
    app[keys.CATALOG] = ConfigCatalog(options.configs_dir)
    app[keys.BANNER] = standby_banner(options)
    leadership = Leadership(
        app[keys.DATABASE],
        advertise_url=options.public_url,
        lease_s=options.leader_lease,
        on_step_down=app.get(keys.STEP_DOWN),
    )
    app[keys.LEADERSHIP] = leadership
    running: list[_RunningFleet] = []

    async def activate() -> None:
        running.append(await _start_fleet(app))

    await leadership.start(activate)
    try:
        yield
    finally:
        for fleet in running:
            await fleet.stop()
        await leadership.close()


class _RunningFleet:
    def __init__(
        self,
        fleet: Fleet,
        runner: LocalRunner | None,
        audit: AuditLog,
        probe: GpuProbe,
        sender: WebhookSender,
    ):
        self.fleet, self.runner, self.audit, self.probe = fleet, runner, audit, probe
        self.sender = sender

    async def stop(self) -> None:
        await self.sender.stop()
        if self.runner is not None:
            await self.runner.stop()
        await self.fleet.stop()
        if self.fleet.ctx.artifacts is not None:
            await self.fleet.ctx.artifacts.close()
        await self.audit.close()
        self.probe.close()


async def _start_fleet(app: web.Application) -> _RunningFleet:
    """Build the actors from storage (as after a restart) and start serving them."""
    options = app[keys.OPTIONS]
    clock = app[keys.CLOCK]
    store = app[keys.STORE]
    metrics = app[keys.METRICS]
    hub = app[keys.HUB]
    audit = AuditLog(store.append_audit, options.data_dir / "audit.jsonl", clock)
    isolation = plan_local(options) if options.local_runner else None
    settings = replace(options.fleet_settings(), local_isolation=isolation)
    if isolation is not None and isolation.off_reason is not None:
        off = f"the local runner is off: {isolation.off_reason}"
        settings = replace(settings, local_runner=False, local_runner_off=off)
        log.warning("local runner off", reason=isolation.off_reason)
    artifacts = Artifacts(
        open_store(options.artifact_store, options.data_dir, options.s3_endpoint_url),
        store,
        audit,
        options.keep_checkpoints,
    )
    outbox = app[keys.WEBHOOKS]
    outbox.reload(await store.webhooks.subscriptions())
    fleet = build_fleet(
        store,
        clock,
        settings,
        audit,
        metrics=metrics,
        hub=hub,
        artifacts=artifacts,
        webhooks=outbox,
    )
    artifacts.start_tidying()
    app[keys.ARTIFACTS] = artifacts
    probe = probe_from_environment()
    inventory = probe.inventory()
    local = local_worker_record(inventory, clock.time()) if settings.local_runner else None
    fleet.limits = await store.limits.limits()  # the scheduler starts under them
    fleet.quotas = await store.limits.quotas()  # and the teams' quotas
    await fleet.load_usage(store.usage.attempt_spans)
    await fleet.start(local_worker=local)
    app[keys.FLEET] = fleet
    app[keys.AUDIT] = audit
    runner: LocalRunner | None = None
    if local is not None and isolation is not None:
        executor = local_executors(options, isolation, store)
        # Well inside the heartbeat timeout, however short an operator sets it.
        interval_s = min(30.0, options.heartbeat_timeout / 4)
        runner = LocalRunner(
            fleet,
            executor,
            inventory,
            heartbeat_interval_s=interval_s,
            orchestrator_url=options.public_url,
        )
        await runner.start()
    admin_token = await ensure_admin_token(store, options.admin_token)
    app[keys.BANNER] = startup_banner(options, admin_token, isolation)
    # Only the active orchestrator sends: from here on, whatever is undelivered.
    sender = WebhookSender(
        store, outbox, allow_private=options.webhooks_allow_private, now=clock.time
    )
    leadership = app[keys.LEADERSHIP]
    if leadership.elected and outbox.active:
        data = {"url": options.public_url, "term": leadership.term}
        await store.atomically(lambda repos: outbox.stage_plain(repos, TAKEOVER, data))
    sender.start()
    app[keys.WEBHOOK_SENDER] = sender
    return _RunningFleet(fleet, runner, audit, probe, sender)


async def _close_streams(app: web.Application) -> None:
    streams = app[keys.OPEN_STREAMS]
    await streams.close()
    for conn in streams:
        conn.close()
    hub = app.get(keys.HUB)
    if hub is not None:
        hub.close()


def run_server(options: ServerOptions) -> int:
    configure_logging(options.log_format, options.verbose)
    try:
        return _serve(options)
    except TunefleetError as error:
        # Bad TLS files, an unreachable or too-new database: one line, no traceback.
        print(f"error: {error}", file=sys.stderr)
        return 1


def _serve(options: ServerOptions) -> int:
    ssl_context = None
    if options.use_ssl:
        if options.ssl_cert and options.ssl_key:
            cert, key = options.ssl_cert, options.ssl_key
        elif options.ssl_cert or options.ssl_key:
            print("error: give both --ssl-cert and --ssl-key, or neither", file=sys.stderr)
            return 2
        else:
            paths = ensure_self_signed(options.data_dir / "tls", [options.host])
            cert, key = paths.cert, paths.key
            # The banner and connection_command name the certificate to trust.
            options = replace(options, ssl_cert=cert, ssl_key=key)
        ssl_context = server_ssl_context(cert, key)
        print(f"TLS certificate {cert} (SHA-256 fingerprint {fingerprint(cert)})", flush=True)
    app = build_app(options)
    app[keys.STEP_DOWN] = _exit_stepped_down
    # Process-wide, so only here: in-process test servers leave the collector alone.
    app.cleanup_ctx.append(gc_policy_ctx)

    async def announce(app: web.Application) -> None:
        print(app[keys.BANNER], flush=True)
        leadership = app[keys.LEADERSHIP]
        if leadership.role != "active":  # a standby: the full banner once it takes over

            async def announce_takeover() -> None:
                await leadership.wait_active()
                print(app[keys.BANNER], flush=True)

            app[keys.BACKGROUND].add(asyncio.create_task(announce_takeover()))

    app.on_startup.append(announce)
    # Process-wide, so only here; before listening, so the banner follows it.
    print(raise_open_file_limit(), flush=True)
    guard = ConnectionGuard(options.limits)
    try:
        run_guarded(app, guard, options.host, options.port, ssl_context)
    except OSError as error:
        print(f"error: cannot listen on {options.host}:{options.port}: {error}", file=sys.stderr)
        return 1
    return 0


def _exit_stepped_down(reason: str) -> None:
    """Another orchestrator holds a newer term. Nothing this process would still write can
    be written (the fence refuses it), so it ends at once, without a goodbye, and its
    supervisor starts it again as a standby."""
    print(f"error: stepping down: {reason}", file=sys.stderr, flush=True)
    os._exit(STEPPED_DOWN_EXIT_CODE)
