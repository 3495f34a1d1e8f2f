"""`tunefleet jobs metrics JOB_ID`: a job's stored metric history (loss, lr, ... per step)."""

from __future__ import annotations

import json

import click

from tunefleet.cli.options import call, connection_options, json_option
from tunefleet.cli.output import print_table
from tunefleet.client.connection import Connection
from tunefleet.client.operations import read_metrics
from tunefleet.metric_table import csv_columns, in_step_order, metrics_csv_pieces


@click.command("metrics")
@click.argument("job_id")
@click.option("--attempt", type=click.IntRange(min=1), help="Only this attempt's points.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV: one column per metric.")
@json_option
@connection_options
def metrics(
    conn: Connection, job_id: str, attempt: int | None, as_csv: bool, as_json: bool
) -> None:
    """Print a job's metric history (GET /api/queue/ID/metrics): one line per reported
    step and attempt, loss first. Long runs are thinned evenly by the orchestrator."""
    points = call(conn, lambda api: read_metrics(api, job_id, attempt))
    if as_json:
        click.echo(json.dumps({"job_id": job_id, "points": points}, indent=2))
        return
    columns = csv_columns(points)
    if columns.omitted:
        click.echo(
            f"{columns.omitted} metric names reported too rarely to show were left out "
            f"(the {len(columns.names)} most reported are shown); --json has them all",
            err=True,
        )
    if as_csv:
        for piece in metrics_csv_pieces(points, columns):
            click.echo(piece, nl=False)
        return
    names = columns.names
    rows = (
        [str(p["attempt"]), str(p["step"]), *(_number(p["values"].get(n)) for n in names)]
        for p in in_step_order(points)
    )
    print_table(
        ["ATTEMPT", "STEP", *names],
        rows,
        empty=f"No metrics stored for {job_id} yet: its trainer has reported no step.",
    )


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"
