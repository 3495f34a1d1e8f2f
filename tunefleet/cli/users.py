"""`tunefleet users ...` and `tunefleet teams ...`: who may use the fleet (``admin.users``)."""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import quote

import click

from tunefleet.cli.options import call, connection_options, json_option
from tunefleet.cli.output import NONE, print_fields, print_json, print_table, relative_time
from tunefleet.client.connection import Connection

# The orchestrator's roles and separate grants (docs/users-and-teams.md).
ROLES = ("viewer", "researcher", "lead", "admin")
GRANTS = ("queue.command", "queue.local")


def _user_path(name: str, action: str = "") -> str:
    return f"/api/admin/users/{quote(name, safe='')}{action}"


def _team_path(name: str, action: str = "") -> str:
    return f"/api/admin/teams/{quote(name, safe='')}{action}"


def _teams_text(user: dict[str, Any]) -> str:
    names = [t["name"] + (" (default)" if t.get("default") else "") for t in user["teams"]]
    return ", ".join(names) or NONE


def _print_user(user: dict[str, Any]) -> None:
    print_fields(
        [
            ("User", user["name"]),
            ("Role", user["role"]),
            ("Grants", ", ".join(user.get("grants") or []) or NONE),
            ("Tokens may hold", ", ".join(user.get("permissions") or []) or "(read only)"),
            ("State", "disabled" if user.get("disabled") else "enabled"),
            ("Teams", _teams_text(user)),
            ("Created", relative_time(user.get("created_at"))),
        ]
    )


def _show_user_or_json(data: dict[str, Any], as_json: bool, line: str) -> None:
    if as_json:
        print_json(data)
        return
    click.echo(line)
    _print_user(data)


# --- users ------------------------------------------------------------------------------


@click.group("users")
def users() -> None:
    """Manage users: create, list, show, disable, enable, set roles and passwords."""


@users.command("create")
@click.argument("name")
@click.option("--role", type=click.Choice(ROLES), default="researcher", show_default=True)
@click.option(
    "--team",
    "teams",
    multiple=True,
    metavar="TEAM",
    help="A team to join; repeatable (the first is the default for their submits).",
)
@click.option(
    "--grant",
    "grants",
    multiple=True,
    type=click.Choice(GRANTS),
    help="A separate grant beside the role; repeatable.",
)
@json_option
@connection_options
def create_user(
    conn: Connection,
    name: str,
    role: str,
    teams: tuple[str, ...],
    grants: tuple[str, ...],
    as_json: bool,
) -> None:
    """Create a user (POST /api/admin/users); give them a token with
    `tunefleet tokens create NAME --user USER`."""
    body = {"name": name, "role": role, "teams": list(teams), "grants": list(grants)}
    data = call(conn, lambda api: api.post("/api/admin/users", body))
    _show_user_or_json(data, as_json, f"Created user {name}.")


@users.command("list")
@json_option
@connection_options
def list_users(conn: Connection, as_json: bool) -> None:
    """List users with their roles and teams."""
    data = call(conn, lambda api: api.get("/api/admin/users"))
    if as_json:
        print_json(data)
        return
    rows = [
        [
            u["name"],
            u["role"],
            ", ".join(u.get("grants") or []) or NONE,
            "disabled" if u.get("disabled") else "enabled",
            _teams_text(u),
        ]
        for u in data["users"]
    ]
    print_table(["USER", "ROLE", "GRANTS", "STATE", "TEAMS"], rows, "No users.", wrap=("TEAMS",))


@users.command("show")
@click.argument("name")
@json_option
@connection_options
def show_user(conn: Connection, name: str, as_json: bool) -> None:
    """Show a user: role, grants, what their tokens may hold, teams."""
    data = call(conn, lambda api: api.get(_user_path(name)))
    if as_json:
        print_json(data)
        return
    _print_user(data)


@users.command("disable")
@click.argument("name")
@json_option
@connection_options
def disable_user(conn: Connection, name: str, as_json: bool) -> None:
    """Disable a user: their tokens stop working at once (the last admin is kept)."""
    data = call(conn, lambda api: api.post(_user_path(name, "/disable")))
    _show_user_or_json(data, as_json, f"Disabled user {name}; their tokens now get HTTP 401.")


@users.command("enable")
@click.argument("name")
@json_option
@connection_options
def enable_user(conn: Connection, name: str, as_json: bool) -> None:
    """Enable a disabled user: their tokens work again."""
    data = call(conn, lambda api: api.post(_user_path(name, "/enable")))
    _show_user_or_json(data, as_json, f"Enabled user {name}.")


@users.command("passwd")
@click.argument("name")
@click.option(
    "--password-stdin",
    is_flag=True,
    help="Read the password from the first line of standard input instead of prompting.",
)
@json_option
@connection_options
def set_password(conn: Connection, name: str, password_stdin: bool, as_json: bool) -> None:
    """Set a user's password for signing in to the web UI; their open sessions end.

    Prompts twice (the typing is hidden), or reads --password-stdin. There are no default
    passwords: until one is set the user signs in with a token."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise click.UsageError("--password-stdin read an empty line; pipe the password in")
    else:
        password = click.prompt(
            f"New password for {name}", hide_input=True, confirmation_prompt=True
        )
    data = call(conn, lambda api: api.post(_user_path(name, "/password"), {"password": password}))
    _show_user_or_json(data, as_json, f"Set the password of {name}; their web sessions have ended.")


@users.command("set-role")
@click.argument("name")
@click.argument("role", type=click.Choice(ROLES))
@click.option(
    "--grant",
    "grants",
    multiple=True,
    type=click.Choice(GRANTS),
    help="Replace the user's separate grants; repeatable (without it: kept).",
)
@click.option("--no-grants", is_flag=True, help="Take away every separate grant.")
@json_option
@connection_options
def set_role(
    conn: Connection,
    name: str,
    role: str,
    grants: tuple[str, ...],
    no_grants: bool,
    as_json: bool,
) -> None:
    """Give a user a role; their tokens follow at once (the last admin is kept)."""
    body: dict[str, Any] = {"role": role}
    if grants or no_grants:
        body["grants"] = [] if no_grants else list(grants)
    data = call(conn, lambda api: api.post(_user_path(name, "/role"), body))
    _show_user_or_json(data, as_json, f"User {name} is now {role}.")


# --- teams ------------------------------------------------------------------------------


@click.group("teams")
def teams() -> None:
    """Manage teams: create, list, show, add and remove members."""


def _members_text(team: dict[str, Any]) -> str:
    names = [m["user"] + (" (default)" if m.get("default") else "") for m in team["members"]]
    return ", ".join(names) or NONE


def _print_team(team: dict[str, Any]) -> None:
    print_fields(
        [
            ("Team", team["name"]),
            ("Members", _members_text(team)),
            ("Created", relative_time(team.get("created_at"))),
        ]
    )


@teams.command("create")
@click.argument("name")
@json_option
@connection_options
def create_team(conn: Connection, name: str, as_json: bool) -> None:
    """Create a team (POST /api/admin/teams)."""
    data = call(conn, lambda api: api.post("/api/admin/teams", {"name": name}))
    if as_json:
        print_json(data)
        return
    click.echo(f"Created team {name}. Add people with: tunefleet teams add-member {name} USER")


@teams.command("list")
@json_option
@connection_options
def list_teams(conn: Connection, as_json: bool) -> None:
    """List teams with their members."""
    data = call(conn, lambda api: api.get("/api/admin/teams"))
    # Each team's quota, GPUs held, borrowed and standing (issue 25; fair_share).
    shares = call(conn, lambda api: api.get("/api/queue/stats")).get("fair_share", {})
    if as_json:
        print_json({**data, "fair_share": shares})
        return
    rows = [
        [t["name"], *_share_cells(shares.get(t["name"])), _members_text(t)] for t in data["teams"]
    ]
    headers = ["TEAM", "QUOTA", "USED", "BORROWED", "STANDING", "MEMBERS"]
    print_table(headers, rows, "No teams.", wrap=("MEMBERS",))


def _share_cells(share: dict[str, Any] | None) -> list[str]:
    if share is None:
        return [NONE, "0", "0", "0"]
    from tunefleet.cli.quotas import quota_text  # cli/quotas.py imports this module

    return [
        quota_text(share["quota"]),
        str(share["used_gpus"]),
        str(share["borrowed_gpus"]),
        f"{share['standing']:.0f}",
    ]


@teams.command("show")
@click.argument("name")
@json_option
@connection_options
def show_team(conn: Connection, name: str, as_json: bool) -> None:
    """Show a team and its members."""
    data = call(conn, lambda api: api.get(_team_path(name)))
    if as_json:
        print_json(data)
        return
    _print_team(data)


@teams.command("add-member")
@click.argument("team")
@click.argument("user")
@click.option("--default", "default", is_flag=True, help="Make it the user's default team.")
@json_option
@connection_options
def add_member(conn: Connection, team: str, user: str, default: bool, as_json: bool) -> None:
    """Put USER in TEAM (their first team is their default)."""
    body = {"user": user, "default": default}
    data = call(conn, lambda api: api.post(_team_path(team, "/members"), body))
    if as_json:
        print_json(data)
        return
    click.echo(f"Added {user} to team {team}.")
    _print_team(data)


@teams.command("remove-member")
@click.argument("team")
@click.argument("user")
@json_option
@connection_options
def remove_member(conn: Connection, team: str, user: str, as_json: bool) -> None:
    """Take USER out of TEAM (their oldest other team becomes the default)."""
    path = _team_path(team, f"/members/{quote(user, safe='')}")
    data = call(conn, lambda api: api.delete(path))
    if as_json:
        print_json(data)
        return
    click.echo(f"Removed {user} from team {team}.")
