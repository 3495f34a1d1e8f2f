"""`tunefleet teams set-quota`: a team's GPU quota (in all and per flavor glob), its
fair-share weight and borrowing limit (issue 25). `teams list` shows where each team
stands against it."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from tunefleet.cli.options import call, connection_options, json_option
from tunefleet.cli.output import NONE, print_json
from tunefleet.cli.users import teams
from tunefleet.client.connection import Connection


def _flavor(value: str) -> tuple[str, int]:
    glob, sep, count = value.rpartition("=")
    if not sep or not glob.strip() or not count.strip().isdigit():
        raise click.BadParameter(f"{value!r}: write GLOB=GPUS, e.g. '*A100*=8'")
    return glob.strip(), int(count)


def quota_text(quota: dict[str, Any]) -> str:
    """'8 GPUs; *A100*=8; weight 2; borrow ≤4' (shown by set-quota and teams list)."""
    parts = []
    if quota.get("gpus") is not None:
        parts.append(f"{quota['gpus']} GPUs")
    parts += [f"{glob}={count}" for glob, count in (quota.get("flavors") or {}).items()]
    if quota.get("weight", 1.0) != 1.0:
        parts.append(f"weight {quota['weight']:g}")
    if quota.get("borrow_limit") is not None:
        parts.append(f"borrow ≤{quota['borrow_limit']}")
    return "; ".join(parts) or NONE


@teams.command("set-quota")
@click.argument("name")
@click.option("--gpus", type=click.IntRange(min=0), help="Nominal GPUs in all.")
@click.option(
    "--flavor",
    "flavors",
    multiple=True,
    metavar="GLOB=GPUS",
    help="Nominal GPUs of a flavor (a gpu_name glob, case-insensitive): '*A100*=8'. "
    "Repeat for more; replaces the flavors set before.",
)
@click.option("--weight", type=float, help="Fair-share weight, above 0 (default 1).")
@click.option("--borrow-limit", type=click.IntRange(min=0), help="GPUs it may borrow.")
@click.option("--no-gpus", is_flag=True, help="Clear the quota in all.")
@click.option("--no-flavors", is_flag=True, help="Clear the per-flavor quotas.")
@click.option("--unlimited-borrowing", is_flag=True, help="Clear the borrowing limit.")
@click.option("--clear", is_flag=True, help="Clear the whole quota: weight 1, no limit.")
@json_option
@connection_options
def set_quota(
    conn: Connection,
    name: str,
    gpus: int | None,
    flavors: tuple[str, ...],
    weight: float | None,
    borrow_limit: int | None,
    no_gpus: bool,
    no_flavors: bool,
    unlimited_borrowing: bool,
    clear: bool,
    as_json: bool,
) -> None:
    """Set a team's GPU quota, fair-share weight and borrowing limit (an option left out
    keeps its value; needs admin.users). Quotas adding up past the fleet are accepted
    (oversubscription) and said, as is a flavor no worker matches."""
    path = f"/api/admin/teams/{quote(name, safe='')}/quota"
    body: dict[str, Any] = {}
    if gpus is not None or no_gpus:
        body["gpus"] = None if no_gpus else gpus
    if flavors or no_flavors:
        body["flavors"] = {} if no_flavors else dict(_flavor(f) for f in flavors)
    if weight is not None:
        if weight <= 0:
            raise click.BadParameter(
                f"{weight:g}: the weight must be above 0", param_hint="--weight"
            )
        body["weight"] = weight
    if borrow_limit is not None or unlimited_borrowing:
        body["borrow_limit"] = None if unlimited_borrowing else borrow_limit
    if clear and body:
        raise click.UsageError("--clear clears everything; give it alone")
    if not clear and not body:
        raise click.UsageError(
            "give --gpus, --flavor, --weight, --borrow-limit (or a --no-... option), or --clear"
        )
    data = call(conn, lambda api: api.delete(path) if clear else api.post(path, body))
    if as_json:
        print_json(data)
        return
    click.echo(f"Team {name}: quota {quota_text(data['quota'])}.")
    for warning in data.get("warnings") or []:
        click.echo(f"Warning: {warning}", err=True)
