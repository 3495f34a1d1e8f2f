"""`tunefleet webhooks add|list|remove|test|enable|deliveries|redeliver` (docs/cli.md,
docs/webhooks.md)."""

from __future__ import annotations

from typing import Any

import click

from tunefleet.cli.options import call, connection_options, json_option
from tunefleet.cli.output import NONE, print_json, print_table, relative_time
from tunefleet.client.connection import Connection
from tunefleet.webhooks.events import EVENT_KINDS

PATH = "/api/admin/webhooks"


def _labels(values: tuple[str, ...]) -> dict[str, str]:
    labels = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: give KEY=VALUE", param_hint="--worker-label")
        labels[key] = value
    return labels


@click.group("webhooks", invoke_without_command=True)
@json_option
@connection_options
@click.pass_context
def webhooks(ctx: click.Context, conn: Connection, as_json: bool) -> None:
    """List webhook subscriptions (yours; every one with admin.webhooks)."""
    if ctx.invoked_subcommand is not None:
        return
    _list(conn, as_json)


@webhooks.command("list")
@json_option
@connection_options
def list_webhooks(conn: Connection, as_json: bool) -> None:
    """List webhook subscriptions (yours; every one with admin.webhooks)."""
    _list(conn, as_json)


def _list(conn: Connection, as_json: bool) -> None:
    data = call(conn, lambda api: api.get(PATH))
    if as_json:
        print_json(data)
        return
    rows = [
        [
            str(hook["id"]),
            hook["url"],
            hook["format"],
            ", ".join(hook["events"]) if len(hook["events"]) < 4 else f"{len(hook['events'])}",
            hook.get("owner") or "all",
            "enabled" if hook["enabled"] else f"DISABLED: {hook.get('disabled_reason')}",
        ]
        for hook in data["webhooks"]
    ]
    columns = ["Id", "URL", "Format", "Events", "Jobs of", "State"]
    print_table(columns, rows, empty="No webhooks. Add one with `tunefleet webhooks add URL`.")


@webhooks.command("add")
@click.argument("target_url", metavar="URL")
@click.option(
    "--event",
    "events",
    multiple=True,
    type=click.Choice(EVENT_KINDS),
    help="Repeatable; default: every event you may have.",
)
@click.option("--format", "fmt", type=click.Choice(["json", "slack"]), default="json")
@click.option("--team", help="Only this team's jobs.")
@click.option("--user", help="Only this user's jobs.")
@click.option("--worker-label", "worker_labels", multiple=True, help="KEY=VALUE, repeatable.")
@click.option("--secret", help="The signing secret (16+ characters); default: one is made.")
@json_option
@connection_options
def add(
    conn: Connection,
    target_url: str,
    events: tuple[str, ...],
    fmt: str,
    team: str | None,
    user: str | None,
    worker_labels: tuple[str, ...],
    secret: str | None,
    as_json: bool,
) -> None:
    """Send events to URL, signed; the secret is printed this once."""
    body: dict[str, Any] = {
        "url": target_url,
        "format": fmt,
        "worker_labels": _labels(worker_labels),
    }
    if events:
        body["events"] = list(events)
    for key, value in (("team", team), ("user", user), ("secret", secret)):
        if value is not None:
            body[key] = value
    data = call(conn, lambda api: api.post(PATH, body))
    if as_json:
        print_json(data)
        return
    click.echo(f"Added webhook {data['id']} → {data['url']} ({len(data['events'])} events).")
    click.echo(f"Signing secret (shown once; keep it with the receiver): {data['secret']}")


@webhooks.command("remove")
@click.argument("webhook_id", type=int)
@connection_options
def remove(conn: Connection, webhook_id: int) -> None:
    """Remove a subscription and its delivery log."""
    call(conn, lambda api: api.delete(f"{PATH}/{webhook_id}"))
    click.echo(f"Removed webhook {webhook_id}.")


@webhooks.command("test")
@click.argument("webhook_id", type=int)
@connection_options
def test(conn: Connection, webhook_id: int) -> None:
    """Send a webhook.test event now; see it with `tunefleet webhooks deliveries ID`."""
    data = call(conn, lambda api: api.post(f"{PATH}/{webhook_id}/test", {}))
    click.echo(f"Sent test event {data['event_id']} to webhook {webhook_id}.")


@webhooks.command("enable")
@click.argument("webhook_id", type=int)
@connection_options
def enable(conn: Connection, webhook_id: int) -> None:
    """Enable a subscription again (a 410 from its receiver disabled it)."""
    call(conn, lambda api: api.post(f"{PATH}/{webhook_id}/enable", {}))
    click.echo(f"Enabled webhook {webhook_id}.")


@webhooks.command("rotate-secret")
@click.argument("webhook_id", type=int)
@click.option("--secret", help="The new signing secret (16+ characters); default: one is made.")
@json_option
@connection_options
def rotate_secret(conn: Connection, webhook_id: int, secret: str | None, as_json: bool) -> None:
    """Sign with a new secret from now on; it is printed this once."""
    body = {"secret": secret} if secret is not None else {}
    data = call(conn, lambda api: api.post(f"{PATH}/{webhook_id}/rotate-secret", body))
    if as_json:
        print_json(data)
        return
    click.echo(f"Webhook {webhook_id} signs with a new secret from now on.")
    click.echo(f"Signing secret (shown once; give it to the receiver): {data['secret']}")


@webhooks.command("deliveries")
@click.argument("webhook_id", type=int)
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@json_option
@connection_options
def deliveries(conn: Connection, webhook_id: int, limit: int, as_json: bool) -> None:
    """A subscription's delivery log, newest first."""
    data = call(
        conn, lambda api: api.get(f"{PATH}/{webhook_id}/deliveries", params={"limit": limit})
    )
    if as_json:
        print_json(data)
        return
    if not data["webhook"]["enabled"]:
        click.echo(f"Webhook {webhook_id} is DISABLED: {data['webhook']['disabled_reason']}")
    rows = [
        [
            d["delivery_id"],
            d["event"],
            d["state"],
            str(d["attempts"]),
            str(d["last_status"]) if d["last_status"] is not None else NONE,
            f"{d['last_latency_ms']:.0f} ms" if d["last_latency_ms"] is not None else NONE,
            d.get("last_error") or NONE,
            relative_time(d.get("created_at")),
        ]
        for d in data["deliveries"]
    ]
    columns = ["Delivery", "Event", "State", "Tries", "Status", "Latency", "Error", "Created"]
    print_table(columns, rows, empty="No deliveries yet.")


@webhooks.command("redeliver")
@click.argument("webhook_id", type=int)
@click.argument("delivery_id")
@connection_options
def redeliver(conn: Connection, webhook_id: int, delivery_id: str) -> None:
    """Send a delivery again now (same X-Tunefleet-Delivery id)."""
    call(conn, lambda api: api.post(f"{PATH}/{webhook_id}/deliveries/{delivery_id}/redeliver", {}))
    click.echo(f"Redelivering {delivery_id}.")
