"""`tunefleet queue concurrency|me` and `tunefleet teams set-limits`: the concurrency
limits in SimpleTuner's spelling (0 is unlimited), and where the caller's jobs stand."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from tunefleet.cli.options import call, connection_options, json_option
from tunefleet.cli.output import NONE, print_fields, print_json, print_table
from tunefleet.cli.users import teams
from tunefleet.client.connection import Connection

_LIMIT = click.IntRange(min=0)


def _limit_text(value: int | None) -> str:
    return "unlimited" if value is None else str(value)


@click.group("queue")
def queue() -> None:
    """The queue's concurrency limits and your place in it."""


@queue.command("concurrency")
@click.option("--max-concurrent", type=_LIMIT, help="Jobs running in the fleet; 0: no limit.")
@click.option("--user-max-concurrent", type=_LIMIT, help="Jobs running per user; 0: no limit.")
@json_option
@connection_options
def concurrency(
    conn: Connection,
    max_concurrent: int | None,
    user_max_concurrent: int | None,
    as_json: bool,
) -> None:
    """Show the limits; with an option, set it (needs queue.admin). Lowering a limit never
    stops a running job."""
    body: dict[str, Any] = {}
    if max_concurrent is not None:
        body["max_concurrent"] = max_concurrent
    if user_max_concurrent is not None:
        body["user_max_concurrent"] = user_max_concurrent
    path = "/api/queue/concurrency"
    data = call(conn, lambda api: api.post(path, body) if body else api.get(path))
    if as_json:
        print_json(data)
        return
    print_fields(
        [
            ("max_concurrent", _limit_text(data["max_concurrent"])),
            ("user_max_concurrent", _limit_text(data["user_max_concurrent"])),
        ]
    )
    rows = [
        [name, _limit_text(t["max_jobs"]), _limit_text(t["max_gpus"])]
        for name, t in data["teams"].items()
    ]
    print_table(["TEAM", "MAX JOBS", "MAX GPUS"], rows, "No team limits.")


@queue.command("me")
@json_option
@connection_options
def me(conn: Connection, as_json: bool) -> None:
    """Your pending, running and awaiting-approval jobs and your best queue position."""
    data = call(conn, lambda api: api.get("/api/queue/me"))
    if as_json:
        print_json(data)
        return
    best = data["best_position"]
    print_fields(
        [
            ("Pending", str(data["pending_count"])),
            ("Running", str(data["running_count"])),
            ("Awaiting approval", str(data["blocked_count"])),
            ("Best position", NONE if best is None else str(best)),
        ]
    )


@teams.command("set-limits")
@click.argument("name")
@click.option("--max-jobs", type=_LIMIT, help="Jobs the team runs at once; 0: no limit.")
@click.option("--max-gpus", type=_LIMIT, help="GPUs the team's jobs hold at once; 0: no limit.")
@json_option
@connection_options
def set_limits(
    conn: Connection, name: str, max_jobs: int | None, max_gpus: int | None, as_json: bool
) -> None:
    """Set a team's concurrency limits (an option left out keeps its value)."""
    body: dict[str, Any] = {}
    if max_jobs is not None:
        body["max_jobs"] = max_jobs
    if max_gpus is not None:
        body["max_gpus"] = max_gpus
    if not body:
        raise click.UsageError("give --max-jobs, --max-gpus or both (0 is no limit)")
    path = f"/api/admin/teams/{quote(name, safe='')}/limits"
    data = call(conn, lambda api: api.post(path, body))
    if as_json:
        print_json(data)
        return
    click.echo(
        f"Team {name}: max jobs {_limit_text(data['max_jobs'])}, "
        f"max GPUs {_limit_text(data['max_gpus'])}."
    )
    if data.get("warning"):
        click.echo(f"Warning: {data['warning']}", err=True)
