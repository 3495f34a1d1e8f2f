"""`tunefleet usage` (GPU-hours per user or team per UTC day) and `tunefleet teams
set-budget / budget / clear-budget` (a team's GPU-hour budget, ``admin.users``)."""

from __future__ import annotations

import csv
import io
from typing import Any
from urllib.parse import quote

import click

from tunefleet.cli.options import call, connection_options, json_option
from tunefleet.cli.output import print_fields, print_json, print_table, relative_time
from tunefleet.cli.users import teams
from tunefleet.client.connection import Connection
from tunefleet.csv_cells import safe_row


def _hours(value: float) -> str:
    return f"{value:.2f}"


@click.command("usage")
@click.option(
    "--by", type=click.Choice(["team", "user"]), default="team", show_default=True,
    help="Sum per team or per user.",
)  # fmt: skip
@click.option("--since", help="Start: an ISO date or time (UTC); default 30 days before --until.")
@click.option("--until", help="End: an ISO date or time (UTC); default now.")
@click.option("--user", help="Only this user's attempts.")
@click.option("--team", help="Only this team's attempts.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV: day, name, GPU-seconds, ...")
@json_option
@connection_options
def usage(
    conn: Connection,
    by: str,
    since: str | None,
    until: str | None,
    user: str | None,
    team: str | None,
    as_csv: bool,
    as_json: bool,
) -> None:
    """GPU-hours burned per team (or user) per UTC day (GET /api/usage): every attempt's
    GPUs x time from dispatch to its end, failed and preempted ones too, running ones up
    to now. You see your own usage; a lead their teams'; an admin everyone's."""
    params = {"by": by, "since": since, "until": until, "user": user, "team": team}
    query = {k: v for k, v in params.items() if v is not None}
    data = call(conn, lambda api: api.get("/api/usage", params=query))
    if as_json:
        print_json(data)
        return
    if as_csv:
        click.echo(usage_csv(data), nl=False)
        return
    rows = [[r["day"], r["name"], _hours(r["gpu_hours"]), str(r["attempts"])] for r in data["rows"]]
    print_table(
        ["DAY", by.upper(), "GPU-HOURS", "ATTEMPTS"],
        rows,
        f"No GPU usage from {data['since']} to {data['until']}.",
    )
    if data["rows"]:
        total = sum(t["gpu_hours"] for t in data["totals"])
        click.echo(f"Total: {_hours(total)} GPU-hours from {data['since']} to {data['until']}")
    for budget in data.get("budgets") or []:
        click.echo(_budget_line(budget))


def usage_csv(data: dict[str, Any]) -> str:
    """The answer as the API's CSV has it (cells a spreadsheet would run escaped)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["day", data["by"], "gpu_seconds", "gpu_hours", "attempts"])
    for r in data["rows"]:
        writer.writerow(
            safe_row([r["day"], r["name"], r["gpu_seconds"], r["gpu_hours"], r["attempts"]])
        )
    return out.getvalue()


def _budget_line(budget: dict[str, Any]) -> str:
    state = "SPENT" if budget["spent"] else "ok"
    return (
        f"Budget of team {budget['team']}: {_hours(budget['used_gpu_hours'])} of "
        f"{budget['gpu_hours']:g} GPU-hours per {budget['period']} used ({state}, action "
        f"{budget['action']}); renews {budget['renews_at']}"
    )


# --- budgets ----------------------------------------------------------------------------


def _budget_path(team: str) -> str:
    return f"/api/admin/teams/{quote(team, safe='')}/budget"


def _print_budget(data: dict[str, Any]) -> None:
    budget = data.get("budget")
    if budget is None:
        click.echo(f"Team {data['team']} has no budget.")
        return
    print_fields(
        [
            ("Team", budget["team"]),
            ("Budget", f"{budget['gpu_hours']:g} GPU-hours per {budget['period']}"),
            ("Action", budget["action"]),
            ("Used", f"{_hours(budget['used_gpu_hours'])} GPU-hours"),
            ("Spent", "yes" if budget["spent"] else "no"),
            ("Renews", f"{budget['renews_at']} ({relative_time(budget['renews_at'])})"),
        ]
    )


@teams.command("set-budget")
@click.argument("team")
@click.option("--gpu-hours", type=click.FloatRange(min=0, min_open=True), required=True)
@click.option(
    "--period", type=click.Choice(["day", "week", "month"]), default="month", show_default=True,
    help="The UTC calendar period the budget covers; it renews at the next one.",
)  # fmt: skip
@click.option(
    "--action", type=click.Choice(["warn", "block"]), default="warn", show_default=True,
    help="warn: submits go through and say so; block: submits are refused.",
)  # fmt: skip
@json_option
@connection_options
def set_budget(
    conn: Connection, team: str, gpu_hours: float, period: str, action: str, as_json: bool
) -> None:
    """Give TEAM a GPU-hour budget per day, week or month (POST /api/admin/teams/NAME/budget)."""
    body = {"gpu_hours": gpu_hours, "period": period, "action": action}
    data = call(conn, lambda api: api.post(_budget_path(team), body))
    if as_json:
        print_json(data)
        return
    click.echo(f"Set the budget of team {team}.")
    _print_budget(data)


@teams.command("budget")
@click.argument("team")
@json_option
@connection_options
def show_budget(conn: Connection, team: str, as_json: bool) -> None:
    """Show TEAM's budget and how much of it is used."""
    data = call(conn, lambda api: api.get(_budget_path(team)))
    if as_json:
        print_json(data)
        return
    _print_budget(data)


@teams.command("clear-budget")
@click.argument("team")
@json_option
@connection_options
def clear_budget(conn: Connection, team: str, as_json: bool) -> None:
    """Remove TEAM's budget."""
    data = call(conn, lambda api: api.delete(_budget_path(team)))
    if as_json:
        print_json(data)
        return
    click.echo(f"Removed the budget of team {team}.")
