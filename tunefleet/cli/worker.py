"""`tunefleet worker`: the worker agent, with the seed document's options and variables.

Exit codes: 0 after a clean stop (signal, shutdown event, an ephemeral worker's job
done), 1 when the agent cannot go on (invalid token, TLS verification, orchestrator
unreachable past --reconnect-timeout), 2 for a usage error (missing URL or token).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from tunefleet.agent import settings as s
from tunefleet.agent.process import run_worker
from tunefleet.errors import TunefleetError
from tunefleet.logging import configure_logging


@click.command("worker")
@click.option(
    "--orchestrator-url",
    envvar=s.ENV_URL,
    metavar="URL[,URL...]",
    help="Orchestrator base URL, e.g. https://host:8001, or several separated by commas "
    f"(an active one and its standbys) (or {s.ENV_URL}).",
)
@click.option(
    "--worker-token",
    envvar=s.ENV_TOKEN,
    metavar="TOKEN",
    help=f"The worker's token, wt_... (or {s.ENV_TOKEN}).",
)
@click.option("--name", envvar=s.ENV_NAME, help="Worker name (default: the host name).")
@click.option(
    "--persistent",
    is_flag=True,
    envvar=s.ENV_PERSISTENT,
    help="Stay online between jobs (default: ephemeral, exit after one job).",
)
@click.option(
    "--labels",
    "labels",
    multiple=True,
    envvar=s.ENV_LABELS,
    metavar="KEY=VALUE",
    help="A label for job matching; repeatable, or comma-separated. Labels the "
    "administrator assigned win over these.",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar=s.ENV_WORK_DIR,
    default=s.DEFAULT_WORK_DIR,
    show_default=True,
    help="Where each job gets its directory (config, logs, progress).",
)
@click.option(
    "--train-command",
    envvar=s.ENV_TRAIN_COMMAND,
    metavar="COMMAND",
    help="Command for jobs that name none (default: python -m simpletuner.train).",
)
@click.option(
    "--allowed-commands",
    "allowed_commands",
    multiple=True,
    metavar="PATTERN",
    help="A command this worker will run, as globs word by word (a last word ** allows "
    "any further arguments; ** alone allows anything); repeatable. Default: the "
    "--train-command, python -m simpletuner.train and tunefleet's example trainer. "
    "A job asking for anything else fails without running.",
)
@click.option(
    "--ssl-no-verify",
    is_flag=True,
    envvar=s.ENV_SSL_NO_VERIFY,
    help="Do not verify the orchestrator's TLS certificate (development only).",
)
@click.option(
    "--ca-cert",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar=s.ENV_CA_CERT,
    help="Trust this CA certificate (PEM) for the orchestrator.",
)
@click.option(
    "--heartbeat-interval",
    type=click.FloatRange(min=0.1),
    default=s.DEFAULT_HEARTBEAT_INTERVAL_S,
    show_default=True,
    envvar=s.ENV_HEARTBEAT_INTERVAL,
    help="Seconds between heartbeats.",
)
@click.option(
    "--stream-timeout",
    type=click.FloatRange(min=1.0),
    default=s.DEFAULT_STREAM_TIMEOUT_S,
    show_default=True,
    envvar=s.ENV_STREAM_TIMEOUT,
    help="Seconds without any event or ping before the stream counts as lost.",
)
@click.option(
    "--reconnect-timeout",
    type=click.FloatRange(min=0.0),
    default=None,
    envvar=s.ENV_RECONNECT_TIMEOUT,
    help="Give up after this many seconds without the orchestrator while no job "
    "runs (default: never for --persistent, 300 for ephemeral).",
)
@click.option(
    "--log-format",
    type=click.Choice(["console", "json"]),
    default="console",
    show_default=True,
    envvar=s.ENV_LOG_FORMAT,
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def worker(
    orchestrator_url: str | None,
    worker_token: str | None,
    name: str | None,
    persistent: bool,
    labels: tuple[str, ...],
    work_dir: Path,
    train_command: str | None,
    allowed_commands: tuple[str, ...],
    ssl_no_verify: bool,
    ca_cert: Path | None,
    heartbeat_interval: float,
    stream_timeout: float,
    reconnect_timeout: float | None,
    log_format: str,
    verbose: bool,
) -> None:
    """Run a worker agent: register with the orchestrator, take jobs, report back."""
    try:
        settings, warnings = s.resolve_settings(
            orchestrator_url=orchestrator_url,
            worker_token=worker_token,
            name=name,
            persistent=persistent,
            labels=labels,
            work_dir=work_dir,
            train_command=train_command,
            allowed_commands=allowed_commands,
            ssl_no_verify=ssl_no_verify,
            ca_cert=ca_cert,
            heartbeat_interval_s=heartbeat_interval,
            stream_timeout_s=stream_timeout,
            reconnect_timeout_s=reconnect_timeout,
        )
    except s.SettingsError as error:
        raise click.UsageError(str(error)) from error
    configure_logging(log_format, verbose)
    for warning in warnings:
        click.secho(warning, err=True, fg="yellow")
    try:
        asyncio.run(run_worker(settings))
    except TunefleetError as error:
        click.secho(f"Error: {error}", err=True, fg="red")
        raise SystemExit(1) from None
