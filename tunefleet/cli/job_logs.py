"""`tunefleet jobs logs JOB_ID [--follow]`: a job's output, all of it or as it comes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, get_args

import click

from tunefleet.cli.follow import outcome_exit_code, stream_logs
from tunefleet.cli.options import call, connection_options, json_option
from tunefleet.client.connection import Connection
from tunefleet.client.errors import StreamFailed
from tunefleet.client.operations import job_path, read_logs
from tunefleet.client.transport import Transport
from tunefleet.fsm.job import TERMINAL_JOB_STATES
from tunefleet.protocol.fields import LogStream


def _echo_line(line: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(line, ensure_ascii=False))
    elif line.get("stream") == "stderr":
        click.secho(str(line.get("line", "")), fg="red")
    elif line.get("stream") == "notice":  # the orchestrator's: the log quota was reached
        click.secho(str(line.get("line", "")), fg="yellow", err=True)
    else:
        click.echo(str(line.get("line", "")))


@click.command("logs")
@click.argument("job_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("--attempt", type=click.IntRange(min=1), help="Only this attempt's lines.")
@click.option("--stream", type=click.Choice(get_args(LogStream)), help="Only this stream.")
@json_option
@connection_options
def logs(
    conn: Connection,
    job_id: str,
    follow: bool,
    attempt: int | None,
    stream: str | None,
    as_json: bool,
) -> None:
    """Print a job's output lines (GET /api/queue/ID/logs). With --follow, new lines as
    they come, and exit with the job's outcome (0 completed, 1 failed, 3 cancelled);
    --json then prints one JSON object per line."""
    if not follow:
        lines = call(conn, lambda api: read_logs(api, job_id, attempt, stream))
        if as_json:
            click.echo(json.dumps({"job_id": job_id, "lines": lines}, indent=2))
            return
        for line in lines:
            _echo_line(line, as_json=False)
        return

    def on_line(line: dict[str, Any]) -> None:
        if attempt is not None and line.get("attempt") != attempt:
            return
        if stream is not None and line.get("stream") != stream:
            return
        _echo_line(line, as_json)

    async def action(api: Transport) -> dict[str, Any]:
        end = await stream_logs(api, job_id, on_line)
        if end is not None:
            return end
        job = await api.get(job_path(job_id))
        if job["status"] not in TERMINAL_JOB_STATES:
            raise StreamFailed(
                f"the log stream of {job_id} ended while the job is {job['status']}; "
                "run the command again to go on"
            )
        return {"status": job["status"], "error": job.get("error")}

    end = call(
        conn,
        action,
        interrupted=lambda: f"Stopped following the logs of {job_id}; the job goes on.",
    )
    status = str(end.get("status"))
    if not as_json:
        message = f"{job_id} {status}" + (f": {end['error']}" if end.get("error") else "")
        click.echo(message, err=True)
    code = outcome_exit_code(status)
    if code:
        raise click.exceptions.Exit(int(code))
