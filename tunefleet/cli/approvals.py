"""`tunefleet approvals` (jobs awaiting a decision the caller may take), `approvals rules
...` (the admin's rules) and `tunefleet jobs approve|reject JOB` (docs/cli.md)."""

from __future__ import annotations

from typing import Any

import click

from tunefleet.approval_rules import CONDITIONS
from tunefleet.cli.options import call, connection_options, json_option
from tunefleet.cli.output import NONE, print_json, print_table, relative_time
from tunefleet.client.connection import Connection
from tunefleet.client.operations import job_path

RULES_PATH = "/api/admin/approval-rules"
ROLES = ("viewer", "researcher", "lead", "admin")


@click.group("approvals", invoke_without_command=True)
@json_option
@connection_options
@click.pass_context
def approvals(ctx: click.Context, conn: Connection, as_json: bool) -> None:
    """List the jobs awaiting approval that you may decide (a lead: their teams'; an admin:
    all); decide with `tunefleet jobs approve|reject JOB`."""
    if ctx.invoked_subcommand is not None:
        return
    data = call(conn, lambda api: api.get("/api/queue/approvals"))
    if as_json:
        print_json(data)
        return
    rows = [
        [
            job["job_id"],
            job.get("name") or NONE,
            f"{job.get('user') or NONE} ({job.get('team') or NONE})",
            str(job.get("gpu_count", 1)),
            relative_time(job.get("submitted_at")),
            job.get("wait_reason") or NONE,
        ]
        for job in data["jobs"]
    ]
    columns = ["Job", "Name", "User (team)", "GPUs", "Submitted", "Why"]
    print_table(columns, rows, empty="No jobs await your approval.")


@approvals.group("rules", invoke_without_command=True)
@json_option
@connection_options
@click.pass_context
def rules(ctx: click.Context, conn: Connection, as_json: bool) -> None:
    """List the approval rules in evaluation order (admin.users); add or delete them."""
    if ctx.invoked_subcommand is not None:
        return
    data = call(conn, lambda api: api.get(RULES_PATH))
    if as_json:
        print_json(data)
        return
    rows = [
        [
            str(rule["id"]),
            rule["description"],
            ", ".join(rule["exempt_roles"]) or NONE,
            "enabled" if rule["enabled"] else "disabled",
        ]
        for rule in data["rules"]
    ]
    print_table(["Id", "Holds", "Exempt", "State"], rows, empty="No approval rules.")


@rules.command("add")
@click.argument("condition", type=click.Choice(CONDITIONS))
@click.argument("threshold", default="")
@click.option("--exempt", "exempt", multiple=True, type=click.Choice(ROLES), help="Repeatable.")
@click.option("--disabled", is_flag=True, help="Store it without evaluating it yet.")
@json_option
@connection_options
def add_rule(
    conn: Connection,
    condition: str,
    threshold: str,
    exempt: tuple[str, ...],
    disabled: bool,
    as_json: bool,
) -> None:
    """Add a rule, evaluated after the existing ones: CONDITION THRESHOLD, e.g.
    `gpus_exceed 4`, `hardware_type 'a100*'`, `first_job`."""
    body: dict[str, Any] = {
        "condition": condition,
        "threshold": threshold,
        "exempt_roles": list(exempt),
        "enabled": not disabled,
    }
    data = call(conn, lambda api: api.post(RULES_PATH, body))
    if as_json:
        print_json(data)
    else:
        click.echo(f"Added approval rule {data['id']}: {data['description']}.")


@rules.command("delete")
@click.argument("rule_id", type=int)
@connection_options
def delete_rule(conn: Connection, rule_id: int) -> None:
    """Delete a rule; jobs it already holds stay held until decided."""
    call(conn, lambda api: api.delete(f"{RULES_PATH}/{rule_id}"))
    click.echo(f"Deleted approval rule {rule_id}.")


@click.command("approve")
@click.argument("job_id")
@json_option
@connection_options
def approve(conn: Connection, job_id: str, as_json: bool) -> None:
    """Approve a job awaiting approval: it queues in its original place."""
    data = call(conn, lambda api: api.post(job_path(job_id, "/approve"), {}))
    if as_json:
        print_json(data)
    else:
        click.echo(f"Approved {job_id}; it is {data['status']}.")


@click.command("reject")
@click.argument("job_id")
@click.option("--reason", help="Why; the job's error says it.")
@json_option
@connection_options
def reject(conn: Connection, job_id: str, reason: str | None, as_json: bool) -> None:
    """Reject a job awaiting approval: it ends cancelled."""
    body = {"reason": reason} if reason else {}
    data = call(conn, lambda api: api.post(job_path(job_id, "/reject"), body))
    if as_json:
        print_json(data)
    else:
        click.echo(f"Rejected {job_id}; it is {data['status']}.")
