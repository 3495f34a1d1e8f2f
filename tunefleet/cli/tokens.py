"""`tunefleet tokens ...`: API tokens for people and scripts (``admin.workers``)."""

from __future__ import annotations

from urllib.parse import quote

import click

from tunefleet.cli.options import call, connection_options, json_option
from tunefleet.cli.output import print_json, print_line, print_table, relative_time
from tunefleet.client.connection import Connection
from tunefleet.client.errors import ENV_TOKEN

# The orchestrator's permissions (docs/api.md); the server checks them too.
PERMISSIONS = (
    "admin.workers",
    "queue.submit",
    "queue.admin",
    "audit.read",
    "queue.command",
    "queue.local",
    "admin.users",
    "queue.approve",
    "usage.read",
    "admin.webhooks",
)
# What each permission lets a token do, for `tokens whoami`.
MEANINGS = {
    "admin.workers": "create, drain, rotate and delete workers; create and revoke API tokens",
    "queue.submit": "submit jobs (the worker's default command or a named configuration)",
    "queue.admin": "cancel anyone's job, preempt a running one",
    "audit.read": "read and verify the audit log",
    "queue.command": "choose the program a job runs (command, loader env, tunefleet_command)",
    "queue.local": "run jobs on the orchestrator's own machine (target local, auto's fallback)",
    "admin.users": "create users and teams, set roles, disable users; tokens for other users",
    "queue.approve": "approve their teams' jobs (a lead's)",
    "usage.read": "read their teams' usage (a lead's)",
    "admin.webhooks": "manage every webhook subscription (anyone may subscribe to their own jobs)",
}


@click.group("tokens")
def tokens() -> None:
    """Create, list and revoke API tokens; see what yours may do."""


@tokens.command("create")
@click.argument("name")
@click.option(
    "--permission",
    "-p",
    "permissions",
    multiple=True,
    type=click.Choice(PERMISSIONS),
    help="What the token may do; repeatable (default: all the user's role allows). No more "
    "than the user's role allows, nor than the token in use holds.",
)
@click.option("--user", metavar="USER", help="Whose token it is (default: yours).")
@json_option
@connection_options
def create_token(
    conn: Connection, name: str, permissions: tuple[str, ...], user: str | None, as_json: bool
) -> None:
    """Create an API token for a user and print it once (POST /api/admin/tokens)."""
    body: dict[str, object] = {"name": name}
    if permissions:
        body["permissions"] = list(permissions)
    if user:
        body["user"] = user
    data = call(conn, lambda api: api.post("/api/admin/tokens", body))
    if as_json:
        print_json(data)
        return
    granted = ", ".join(data["permissions"]) or "no permission (it reads what its user may see)"
    owner = f" for user {data['user']}" if data.get("user") else ""
    click.echo(f"Created API token {data['name']} (id {data['id']}){owner} with {granted}.")
    click.echo("The token is shown only now; the orchestrator keeps just its hash:")
    print_line(f"  {data['token']}")
    click.echo("Use it with:")
    print_line(f"  export {ENV_TOKEN}={data['token']}")


@tokens.command("list")
@json_option
@connection_options
def list_tokens(conn: Connection, as_json: bool) -> None:
    """List API tokens, revoked ones too; never the tokens themselves."""
    data = call(conn, lambda api: api.get("/api/admin/tokens"))
    if as_json:
        print_json(data)
        return
    rows = [
        [
            t["id"],
            t["name"],
            t.get("user") or "-",
            ", ".join(t["permissions"]),
            relative_time(t.get("created_at")),
            relative_time(t.get("last_used_at")) if t.get("last_used_at") else "never",
            f"revoked {relative_time(t['revoked_at'])}" if t.get("revoked_at") else "active",
        ]
        for t in data["tokens"]
    ]
    columns = ["ID", "NAME", "USER", "PERMISSIONS", "CREATED", "LAST USED", "STATE"]
    print_table(columns, rows, "No API tokens.", wrap=("PERMISSIONS",))


@tokens.command("revoke")
@click.argument("token_id")
@json_option
@connection_options
def revoke_token(conn: Connection, token_id: str, as_json: bool) -> None:
    """Revoke an API token at once (DELETE /api/admin/tokens/ID)."""
    data = call(conn, lambda api: api.delete(f"/api/admin/tokens/{quote(token_id, safe='')}"))
    if as_json:
        print_json(data)
        return
    click.echo(f"Revoked API token {token_id}; requests with it now get HTTP 401.")


@tokens.command("whoami")
@json_option
@connection_options
def whoami(conn: Connection, as_json: bool) -> None:
    """Show the token in use and what it may and may not do (GET /api/auth/whoami)."""
    data = call(conn, lambda api: api.get("/api/auth/whoami"))
    if as_json:
        print_json(data)
        return
    held = set(data["permissions"])
    click.echo(f"API token {data['name']} (id {data['id']}).")
    if data.get("user"):
        teams = ", ".join(data.get("teams") or []) or "none"
        click.echo(
            f"User {data['user']}, role {data.get('role')}, teams {teams} "
            f"(default {data.get('default_team') or 'none'})."
        )
    rows = [[p, "yes" if p in held else "no", MEANINGS.get(p, "")] for p in PERMISSIONS]
    rows += [[p, "yes", ""] for p in sorted(held - set(PERMISSIONS))]
    print_table(["PERMISSION", "HELD", "LETS IT"], rows, "", wrap=("LETS IT",))
