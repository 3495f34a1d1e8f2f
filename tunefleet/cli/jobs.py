"""`tunefleet jobs ...`: submit, list, show, cancel, logs; ``--follow`` until the end.

A follow exits with the job's outcome: 0 completed, 1 failed, 3 cancelled (docs/cli.md).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from tunefleet.cli.approvals import approve, reject
from tunefleet.cli.artifacts import artifacts, download
from tunefleet.cli.follow import follow_job, outcome_exit_code
from tunefleet.cli.follow_view import LineReporter, LiveReporter, QuietReporter, final_line
from tunefleet.cli.job_logs import logs
from tunefleet.cli.job_metrics import metrics
from tunefleet.cli.options import call, connection_options, json_option, parse_pairs
from tunefleet.cli.output import (
    NONE,
    attempts_apart,
    console,
    no_match,
    paging_footer,
    pairs_text,
    plain,
    print_fields,
    print_json,
    print_table,
    progress_text,
    relative_time,
    status_text,
)
from tunefleet.client.connection import Connection
from tunefleet.client.local_config import LocalConfigError, resolve
from tunefleet.client.operations import job_path
from tunefleet.client.transport import Transport
from tunefleet.fsm.job import TERMINAL_JOB_STATES, JobState

JOB_STATUSES = tuple(state.value for state in JobState)
TARGETS = ("worker", "local", "auto")

follow_option = click.option(
    "--follow", "-f", is_flag=True, help="Watch it until it ends; exit with its outcome."
)
logs_option = click.option(
    "--logs", "show_logs", is_flag=True, help="Follow with the log tail too (implies --follow)."
)


@click.group("jobs")
def jobs() -> None:
    """Submit jobs, watch them, cancel them, read their logs and metrics."""


jobs.add_command(logs)
jobs.add_command(metrics)
jobs.add_command(artifacts)
jobs.add_command(download)
jobs.add_command(approve)
jobs.add_command(reject)


def _submit_body(
    config: str,
    name: str | None,
    target: str | None,
    labels: tuple[str, ...],
    gpus: int | None,
    min_vram: float | None,
    gpu_name: str | None,
    priority: int | None,
    retries: int | None,
    timeout: float | None,
    env: tuple[str, ...],
) -> dict[str, Any]:
    try:
        source = resolve(config)
    except LocalConfigError as error:
        raise click.BadParameter(str(error), param_hint="CONFIG") from error
    body: dict[str, Any] = {
        **source.body(),
        "target": target,
        "worker_labels": parse_pairs(labels, "--label") or None,
        "gpu_count": gpus,
        "min_vram_gb": min_vram,
        "gpu_name": gpu_name,
        "priority": priority,
        "max_retries": retries,
        "timeout_minutes": timeout,
        "env": parse_pairs(env, "--env") or None,
    }
    if name is not None:
        body["name"] = name
    return {k: v for k, v in body.items() if v is not None}


def _submitted_line(data: dict[str, Any]) -> str:
    text = f"Submitted {data['job_id']}: {data.get('status') or JobState.PENDING}"
    if data.get("allocated_worker_id"):
        text += f" to {data['allocated_worker_id']}"
    if data.get("queue_position"):
        text += f", position {data['queue_position']}"
    if data.get("reason"):
        text += f" ({data['reason']})"
    return text


def follow_and_exit(
    conn: Connection,
    *,
    job_id: str | None = None,
    submit: dict[str, Any] | None = None,
    show_logs: bool = False,
    as_json: bool = False,
) -> None:
    """Submit (if asked) and follow one job to its end; exits with its outcome code."""
    out = console()
    followed: dict[str, str] = {}

    async def action(api: Transport) -> dict[str, Any]:
        target = job_id
        if submit is not None:
            data = await api.post("/api/queue/submit", submit)
            target = str(data["job_id"])
            if not as_json:
                click.echo(_submitted_line(data))
        followed["job_id"] = str(target)
        reporter: LiveReporter | LineReporter | QuietReporter
        if as_json:
            reporter = QuietReporter()
        elif out.is_terminal:
            reporter = LiveReporter(out)
        else:
            reporter = LineReporter(out, show_logs)
        with reporter:
            return await follow_job(api, str(target), reporter, show_logs)

    def interrupted() -> str | None:
        if "job_id" not in followed:
            return None
        jid = followed["job_id"]
        return f"Stopped following {jid}; the job goes on. Cancel it: tunefleet jobs cancel {jid}"

    detail = call(conn, action, interrupted=interrupted)
    if as_json:
        print_json(detail)
    else:
        click.echo(final_line(detail))
    code = outcome_exit_code(detail["status"])
    if code:
        raise click.exceptions.Exit(int(code))


@jobs.command("submit")
@click.argument("config")
@click.option("--name", help="A name for the job (default: the config's).")
@click.option(
    "--target",
    type=click.Choice(TARGETS),
    help="worker: remote workers only; local: the orchestrator's GPUs; auto (default).",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=GLOB",
    help="Only workers whose label KEY matches GLOB (a100*); repeatable.",
)
@click.option("--gpus", type=click.IntRange(0, 1024), help="GPUs the job needs.")
@click.option("--min-vram", type=click.FloatRange(min=0), metavar="GB", help="VRAM per GPU.")
@click.option("--gpu-name", metavar="GLOB", help="GPU model, e.g. '*A100*'.")
@click.option("--priority", type=click.IntRange(-100, 100), help="Higher goes first (default 0).")
@click.option("--retries", type=click.IntRange(0, 20), help="Retries after a lost worker.")
@click.option(
    "--timeout", type=click.FloatRange(min=0, min_open=True), metavar="MINUTES", help="Run limit."
)
@click.option("--env", multiple=True, metavar="KEY=VALUE", help="Environment for the job.")
@click.option("--team", metavar="TEAM", help="One of your teams (default: your default team).")
@follow_option
@logs_option
@json_option
@connection_options
def submit(
    conn: Connection,
    config: str,
    name: str | None,
    target: str | None,
    labels: tuple[str, ...],
    gpus: int | None,
    min_vram: float | None,
    gpu_name: str | None,
    priority: int | None,
    retries: int | None,
    timeout: float | None,
    env: tuple[str, ...],
    team: str | None,
    follow: bool,
    show_logs: bool,
    as_json: bool,
) -> None:
    """Submit CONFIG: a config name on the orchestrator, or a local .json/.toml/.yaml file
    (or SimpleTuner config folder) sent inline (POST /api/queue/submit)."""
    body = _submit_body(
        config, name, target, labels, gpus, min_vram, gpu_name, priority, retries, timeout, env
    )
    if team:
        body["team"] = team
    if follow or show_logs:
        follow_and_exit(conn, submit=body, show_logs=show_logs, as_json=as_json)
        return
    data = call(conn, lambda api: api.post("/api/queue/submit", body))
    if as_json:
        print_json(data)
        return
    click.echo(_submitted_line(data))
    click.echo(f"Follow it with: tunefleet jobs show {data['job_id']} --follow")


@jobs.command("list")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(JOB_STATUSES),
    help="Only jobs in this state; repeatable.",
)
@click.option("--target", type=click.Choice(TARGETS))
@click.option("--worker", "worker_id", metavar="WORKER_ID", help="Only this worker's jobs.")
@click.option("--user", metavar="USER", help="Only this user's jobs.")
@click.option("--team", metavar="TEAM", help="Only this team's jobs.")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0)
@json_option
@connection_options
def list_jobs(
    conn: Connection,
    statuses: tuple[str, ...],
    target: str | None,
    worker_id: str | None,
    user: str | None,
    team: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    """List the jobs you may see (yours and your teams'; an admin's: all), newest first
    (GET /api/queue)."""
    params = {
        "status": ",".join(statuses) or None,
        "target": target,
        "worker_id": worker_id,
        "user": user,
        "team": team,
        "limit": limit,
        "offset": offset,
    }
    data = call(conn, lambda api: api.get("/api/queue", params))
    if as_json:
        print_json(data)
        return
    rows = [
        [
            j["job_id"],
            j.get("name") or NONE,
            status_text(j["status"]),
            owner_text(j),
            j.get("worker_id") or NONE,
            progress_text(j.get("progress")),
            plain(j.get("priority")),
            relative_time(j.get("submitted_at")),
        ]
        for j in data["jobs"]
    ]
    columns = ["ID", "NAME", "STATUS", "OWNER", "WORKER", "PROGRESS", "PRI", "SUBMITTED"]
    footer = paging_footer(len(rows), offset, data.get("total", len(rows)))
    filters = {
        "--status": statuses,
        "--target": target,
        "--worker": worker_id,
        "--user": user,
        "--team": team,
        "--offset": str(offset) if offset else None,
    }
    empty = no_match("job", filters, "No jobs. Submit one with: tunefleet jobs submit CONFIG")
    print_table(columns, rows, empty, footer, wrap=("NAME",))


def owner_text(job: dict[str, Any]) -> str:
    """``user/team``: whose job it is."""
    if not job.get("user"):
        return NONE
    return f"{job['user']}/{job.get('team') or NONE}"


def _requirements(job: dict[str, Any]) -> str:
    gpus = job.get("gpu_count") or 0
    parts = [f"target {job.get('target')}", f"{gpus} GPU(s)" if gpus else "any worker"]
    if job.get("min_vram_gb") is not None:
        parts.append(f">= {plain(job['min_vram_gb'])} GB")
    if job.get("gpu_name"):
        parts.append(f"GPU {job['gpu_name']}")
    if job.get("worker_labels"):
        parts.append(f"labels {pairs_text(job['worker_labels'])}")
    return ", ".join(parts)


def attempts_text(job: dict[str, Any]) -> str:
    """Attempts used of those allowed. A dispatch that never reached its worker, a
    preempted attempt and one the infrastructure ended spend no retry, so they are counted
    apart: "3 of 1" would read as a bug."""
    spent_none, notes = attempts_apart(job)
    text = f"{(job.get('attempts') or 0) - spent_none} of {(job.get('max_retries') or 0) + 1}"
    return f"{text} ({notes})" if notes else text


def _print_job(job: dict[str, Any]) -> None:
    state = status_text(job["status"])
    if job.get("queue_position"):
        state.append(f", position {job['queue_position']}")
    attempts = attempts_text(job)
    print_fields(
        [
            ("ID", job["job_id"]),
            ("Name", job.get("name") or NONE),
            ("Config", job.get("config_name") or "(inline)"),
            ("Owner", f"{job.get('user') or NONE} (team {job.get('team') or NONE})"),
            ("Status", state),
            *([("Waiting because", job["wait_reason"])] if job.get("wait_reason") else []),
            *([("Error", job["error"])] if job.get("error") else []),
            ("Needs", _requirements(job)),
            ("Worker", job.get("worker_id") or NONE),
            ("Attempts", attempts),
            ("Priority", plain(job.get("priority"))),
            ("Progress", progress_text(job.get("progress"))),
            ("Command", " ".join(job.get("command") or []) or NONE),
            ("Submitted", f"{relative_time(job.get('submitted_at'))} by {job.get('submitted_by')}"),
            ("Started", relative_time(job.get("started_at"))),
            ("Finished", relative_time(job.get("finished_at"))),
        ]
    )
    history = job.get("attempt_history") or []
    if history:
        click.echo()
        print_table(
            ["ATTEMPT", "WORKER", "DISPATCHED", "ENDED", "OUTCOME", "KIND", "REASON"],
            [
                [
                    str(a["number"]),
                    a.get("worker_id") or NONE,
                    relative_time(a.get("dispatched_at")),
                    relative_time(a.get("ended_at")),
                    a.get("outcome") or NONE,
                    a.get("kind") or NONE,
                    a.get("reason") or NONE,
                ]
                for a in history
            ],
            "",
            wrap=("REASON",),
        )


@jobs.command("show")
@click.argument("job_id")
@follow_option
@logs_option
@json_option
@connection_options
def show_job(conn: Connection, job_id: str, follow: bool, show_logs: bool, as_json: bool) -> None:
    """Show one job with its attempts (GET /api/queue/ID); --follow watches it."""
    if follow or show_logs:
        follow_and_exit(conn, job_id=job_id, show_logs=show_logs, as_json=as_json)
        return
    job = call(conn, lambda api: api.get(job_path(job_id)))
    if as_json:
        print_json(job)
    else:
        _print_job(job)


@jobs.command("cancel")
@click.argument("job_id")
@click.option("--reason", help="Why (kept in the audit log).")
@json_option
@connection_options
def cancel_job(conn: Connection, job_id: str, reason: str | None, as_json: bool) -> None:
    """Cancel a job: a pending one leaves the queue, a running one is stopped."""
    body = {"reason": reason} if reason else {}
    data = call(conn, lambda api: api.post(job_path(job_id, "/cancel"), body))
    if as_json:
        print_json(data)
    elif data.get("status") in TERMINAL_JOB_STATES:
        click.echo(f"Cancelled {job_id}.")
    else:
        click.echo(f"Cancelling {job_id}: its worker is stopping it.")


@jobs.command("preempt")
@click.argument("job_id")
@click.option("--reason", help="Why (shown in the job's timeline and kept in the audit log).")
@json_option
@connection_options
def preempt_job(conn: Connection, job_id: str, reason: str | None, as_json: bool) -> None:
    """Preempt a running job (admin): its trainer writes a checkpoint and stops, and the
    job goes back to the head of its priority band, spending no retry; its next attempt
    resumes from the newest stored checkpoint."""
    body = {"reason": reason} if reason else {}
    path = f"/api/jobs/{quote(job_id, safe='')}/preempt"
    data = call(conn, lambda api: api.post(path, body))
    if as_json:
        print_json(data)
        return
    click.echo(
        f"Preempting {job_id} (attempt {data['attempt']}): its trainer has "
        f"{data['grace_seconds']:g} s to write a checkpoint, then the job is queued again."
    )
