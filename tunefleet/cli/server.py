"""`tunefleet server`: the orchestrator, with the seed document's options."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from tunefleet.actors.quarantine_policy import (
    DEFAULT_QUARANTINE_AFTER,
    DEFAULT_QUARANTINE_WINDOW_S,
)
from tunefleet.commands import BadPattern, parse_patterns
from tunefleet.fsm.job import DEFAULT_INFRA_RETRIES
from tunefleet.http.app import ServerOptions, run_server
from tunefleet.limits import DEFAULT_MIN_FREE_DISK, BadLimit, FreeDiskFloor, Limits, parse_size
from tunefleet.storage.leadership import DEFAULT_LEASE_S

DEFAULT_DATA_DIR = Path.home() / ".tunefleet"


def _checked_patterns(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> tuple[str, ...]:
    try:
        return parse_patterns(values)
    except BadPattern as error:
        raise click.BadParameter(str(error)) from error


class _LimitType(click.ParamType):
    """A bound read by its parser in tunefleet/limits.py, its BadLimit a usage error."""

    def __init__(self, name: str, parse: Callable[[str], object], kind: type) -> None:
        self.name, self._parse, self._kind = name, parse, kind

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> object:
        if isinstance(value, self._kind):
            return value
        try:
            return self._parse(str(value))
        except BadLimit as error:
            self.fail(str(error), param, ctx)


# A byte count (``4096``, ``256MiB``, ``1GiB``) and the free-disk floor (``1GiB,5%``).
_SIZE = _LimitType("size", parse_size, int)
_DISK_FLOOR = _LimitType("floor", FreeDiskFloor.parse, FreeDiskFloor)


_DEFAULTS = Limits()


def _limit_options(command: Callable[..., None]) -> Callable[..., None]:
    """The bounds on what a client can grow (tunefleet/limits.py; docs/operations.md,
    "Limits and abuse")."""
    options = [
        click.option(
            "--max-log-bytes-per-attempt",
            type=_SIZE,
            default="256MiB",
            show_default=True,
            help="Log bytes stored per attempt; past it lines are dropped and counted.",
        ),
        click.option(
            "--max-body-bytes",
            type=_SIZE,
            default="1MiB",
            show_default=True,
            help="Largest request body (artifact uploads are streamed and not bounded by it).",
        ),
        click.option(
            "--max-progress-keys",
            type=click.IntRange(1, 100_000),
            default=_DEFAULTS.max_progress_keys,
            show_default=True,
            help="Keys a job's merged progress object may hold; a report past it gets 400.",
        ),
        click.option(
            "--max-progress-bytes",
            type=_SIZE,
            default="256KiB",
            show_default=True,
            help="Size of a job's merged progress object as JSON; a report past it gets 400.",
        ),
        click.option(
            "--auth-failures-per-window",
            type=click.IntRange(1, 1_000_000),
            default=_DEFAULTS.auth_failures_per_window,
            show_default=True,
            help="Failed authentications one client address may make per window before 429.",
        ),
        click.option(
            "--auth-failure-window",
            "auth_failure_window_s",
            type=click.FloatRange(min=1.0),
            default=_DEFAULTS.auth_failure_window_s,
            show_default=True,
            help="Seconds of the failed-authentication window.",
        ),
        click.option(
            "--session-idle",
            "session_idle_s",
            type=click.FloatRange(min=60.0),
            default=_DEFAULTS.session_idle_s,
            show_default=True,
            help="Seconds a signed-in web session lasts without a request.",
        ),
        click.option(
            "--session-max",
            "session_max_s",
            type=click.FloatRange(min=60.0),
            default=_DEFAULTS.session_max_s,
            show_default=True,
            help="Seconds a signed-in web session lasts at most, however used.",
        ),
        click.option(
            "--sign-in-failures-per-user",
            type=click.IntRange(1, 1_000_000),
            default=_DEFAULTS.sign_in_failures_per_user,
            show_default=True,
            help="Failed password sign-ins for one user name per window before 429.",
        ),
        click.option(
            "--sign-in-user-window",
            "sign_in_user_window_s",
            type=click.FloatRange(min=1.0),
            default=_DEFAULTS.sign_in_user_window_s,
            show_default=True,
            help="Seconds of the per-user failed sign-in window.",
        ),
        click.option(
            "--max-connections-per-address",
            type=click.IntRange(0, 1_000_000),
            default=_DEFAULTS.max_connections_per_address,
            show_default=True,
            help="Open connections one client address may hold (0: no cap).",
        ),
        click.option(
            "--request-header-timeout",
            "request_header_timeout_s",
            type=click.FloatRange(min=0.1),
            default=_DEFAULTS.request_header_timeout_s,
            show_default=True,
            help="Seconds a client has to send a request's headers.",
        ),
        click.option(
            "--min-free-disk",
            type=_DISK_FLOOR,
            default=DEFAULT_MIN_FREE_DISK,
            show_default=True,
            help="Free disk kept in reserve (a size, a percentage, or both: the smaller "
            "wins; 0 for none): below it new logs, artifacts and jobs get 507.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command("server")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    envvar="TUNEFLEET_HOST",
    help="Address to listen on; 0.0.0.0 to accept workers from other machines.",
)
@click.option(
    "--port",
    default=8001,
    show_default=True,
    type=click.IntRange(1, 65535),
    envvar="TUNEFLEET_PORT",
)
@click.option(
    "--ssl",
    "use_ssl",
    is_flag=True,
    help="Serve HTTPS (TLS 1.2+). Without --ssl-cert/--ssl-key a self-signed "
    "certificate is generated once in the data directory.",
)
@click.option("--ssl-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--ssl-key", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_DATA_DIR,
    show_default=True,
    envvar="TUNEFLEET_DATA_DIR",
    help="Database, audit log and TLS files.",
)
@click.option(
    "--database-url",
    envvar="TUNEFLEET_DATABASE_URL",
    default=None,
    help="postgresql://user@host:port/db; default: SQLite in the data directory.",
)
@click.option(
    "--configs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("configs"),
    show_default=True,
    envvar="TUNEFLEET_CONFIGS_DIR",
    help="Training configurations submitted by name.",
)
@click.option(
    "--heartbeat-timeout",
    type=click.FloatRange(min=1.0),
    default=120.0,
    show_default=True,
    envvar="SIMPLETUNER_HEARTBEAT_TIMEOUT",
    help="Seconds without a heartbeat before a worker is offline.",
)
@click.option(
    "--health-check-interval",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    help="Seconds between health checks.",
)
@click.option(
    "--dispatch-ack-timeout",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    help="Seconds a worker has to acknowledge a dispatched job.",
)
@click.option(
    "--reconnect-grace",
    type=click.FloatRange(min=0.0),
    default=5.0,
    show_default=True,
    help="Seconds a worker whose stream closed keeps a job it has not acknowledged "
    "before the job goes back to the queue.",
)
@click.option(
    "--fair-share-half-life",
    type=click.FloatRange(min=0.01),
    default=168.0,
    show_default=True,
    help="Hours after which a team's GPU-time counts half in its fair-share standing "
    "(7 days, like Slurm's PriorityDecayHalfLife).",
)
@click.option(
    "--min-runtime-before-preempt",
    type=click.FloatRange(min=0.0),
    default=600.0,
    show_default=True,
    help="Seconds a job runs before a reclaim of borrowed GPUs may preempt it; nor is a "
    "job preempted twice within it.",
)
@click.option(
    "--priority-preemption/--no-priority-preemption",
    default=False,
    show_default=True,
    help="Let a team's higher-priority job preempt a lower-priority job of the same team.",
)
@click.option(
    "--preempt-grace",
    type=click.FloatRange(min=0.0),
    default=120.0,
    show_default=True,
    help="Seconds a preempted job's trainer has after SIGTERM to write a checkpoint and "
    "exit before its agent kills it.",
)
@click.option(
    "--preempt-slack",
    type=click.FloatRange(min=0.0),
    default=60.0,
    show_default=True,
    help="Seconds past --preempt-grace the orchestrator waits for the worker's report on a "
    "preempted job (its checkpoint upload) before it requeues the job without it.",
)
@click.option(
    "--ping-interval",
    type=click.FloatRange(min=1.0, max=30.0),
    default=15.0,
    show_default=True,
    help="Seconds between pings on a quiet worker stream; a worker whose machine "
    "vanished (no close) is noticed within three of them.",
)
@click.option(
    "--max-retries",
    type=click.IntRange(0, 20),
    default=3,
    show_default=True,
    help="Default retries for a job whose trainer fails on its own (a job error).",
)
@click.option(
    "--infra-retries",
    type=click.IntRange(0, 100),
    default=DEFAULT_INFRA_RETRIES,
    show_default=True,
    help="Retries for a job after infrastructure failures (its worker lost, OOM-killed, "
    "CUDA/NCCL/Xid errors, a GPU gone, a full disk), apart from max_retries.",
)
@click.option(
    "--quarantine-after",
    type=click.IntRange(0, 1000),
    default=DEFAULT_QUARANTINE_AFTER,
    show_default=True,
    help="Quarantine a worker after this many consecutive failures that were its fault "
    "(infrastructure failures, or job errors of jobs that then succeeded elsewhere) "
    "within --quarantine-window; 0: never automatically.",
)
@click.option(
    "--quarantine-window",
    type=click.FloatRange(min=1.0),
    default=DEFAULT_QUARANTINE_WINDOW_S,
    show_default=True,
    help="Seconds within which --quarantine-after failures quarantine a worker.",
)
@click.option(
    "--admin-token",
    envvar="TUNEFLEET_ADMIN_TOKEN",
    default=None,
    help="Use this admin API token instead of generating one on first start.",
)
@click.option(
    "--local-runner/--no-local-runner",
    default=True,
    show_default=True,
    help="Run `target: local` jobs on this machine's GPUs.",
)
@click.option(
    "--local-train-command",
    default=None,
    help="Command the local runner starts when a job names none "
    "(default: python -m simpletuner.train).",
)
@click.option(
    "--advertise-url",
    envvar="TUNEFLEET_ADVERTISE_URL",
    default=None,
    help="The URL this orchestrator is reached at (the local runner's trainers store "
    "outputs through it; standbys name the active one's in their 503 answers); default: "
    "the address it listens on.",
)
@click.option(
    "--artifact-store",
    envvar="TUNEFLEET_ARTIFACT_STORE",
    default=None,
    help="Where job outputs and checkpoints are kept: s3://bucket/prefix for a bucket "
    "(AWS_* variables for credentials); default: <data-dir>/artifacts.",
)
@click.option(
    "--s3-endpoint-url",
    envvar="TUNEFLEET_S3_ENDPOINT_URL",
    default=None,
    help="Endpoint of an S3-compatible service (MinIO, R2, ...) for --artifact-store s3://.",
)
@click.option(
    "--keep-checkpoints",
    type=click.IntRange(1, 1000),
    default=3,
    show_default=True,
    envvar="TUNEFLEET_KEEP_CHECKPOINTS",
    help="Complete checkpoints kept per job; older ones are deleted.",
)
@click.option(
    "--local-allowed-commands",
    "local_allowed_commands",
    multiple=True,
    metavar="PATTERN",
    callback=_checked_patterns,
    help="A command the local runner will run, as globs word by word (a last word ** "
    "allows any further arguments; ** alone allows anything); repeatable. Default: the "
    "--local-train-command, python -m simpletuner.train and tunefleet's example trainer.",
)
@click.option(
    "--leader-lease",
    type=click.FloatRange(min=1.0, max=300.0),
    default=DEFAULT_LEASE_S,
    show_default=True,
    envvar="TUNEFLEET_LEADER_LEASE",
    help="PostgreSQL only: seconds the active orchestrator's lease lasts without renewal; "
    "a standby takes over within about this long of the active one going away.",
)
@click.option(
    "--local-runner-user",
    default=None,
    metavar="USER",
    help="When the orchestrator runs as root, isolated local trainers run as this user "
    "(default: nobody).",
)
@click.option(
    "--local-work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where local jobs get their directories, outside the data directory; jobs run "
    "as the orchestrator's own user get its own-user/ folder (default: "
    "/var/tmp/tunefleet-local-runner, with -<uid> after it when not root).",
)
@click.option(
    "--webhooks-allow-private",
    is_flag=True,
    envvar="TUNEFLEET_WEBHOOKS_ALLOW_PRIVATE",
    help="Let webhooks target loopback, link-local and private addresses (a receiver on "
    "this machine or the LAN); by default they are refused (SSRF). The cloud metadata "
    "address stays refused.",
)
@click.option(
    "--local-runner-unisolated",
    is_flag=True,
    help="Run every local job as the orchestrator's own user, able to read its data "
    "directory (by default only admins' do; others' run isolated). Only if everyone "
    "holding queue.local may also control the orchestrator.",
)
@click.option(
    "--local-runner-isolated-only",
    is_flag=True,
    help="Run every local job isolated, admins' too; where isolation cannot be had "
    "(not root, or the runner user cannot run the trainer) the local runner stays off.",
)
@click.option(
    "--log-format", type=click.Choice(["console", "json"]), default="console", show_default=True
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@_limit_options
def server(**kwargs: object) -> None:
    """Start the orchestrator."""
    if kwargs.get("local_runner_unisolated") and kwargs.get("local_runner_isolated_only"):
        raise click.UsageError(
            "--local-runner-unisolated and --local-runner-isolated-only contradict each "
            "other; pass one of them"
        )
    options = ServerOptions.from_cli(kwargs)
    raise SystemExit(run_server(options))
