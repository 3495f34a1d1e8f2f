"""`tunefleet audit ...`: read the audit trail and verify its hash chain (``audit.read``)."""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from datetime import datetime
from typing import Any

import click

from tunefleet.cli.exit_codes import ExitCode
from tunefleet.cli.options import call, connection_options, json_option
from tunefleet.cli.output import NONE, print_json, print_table, relative_time
from tunefleet.client.connection import Connection

_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|min|h|d)", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86_400}
MOMENT_FORMS = (
    "an age (30m, 2h, 1d; units s, m, h, d), ISO 8601 (2024-01-15T10:30:00Z) or unix seconds"
)


class Moment(click.ParamType):
    """'30m', '2h', '1d' ago become unix seconds; ISO 8601 and unix seconds pass through
    (the orchestrator reads both). Anything else is a usage error (exit 2) that lists
    every form, checked here so the user learns about the relative forms too."""

    name = "moment"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip()
        if match := _AGO.fullmatch(text):
            seconds = float(match.group(1)) * _UNIT_S[match.group(2).lower()]
            return f"{time.time() - seconds:.3f}"
        with contextlib.suppress(ValueError):
            if math.isfinite(float(text)):
                return text
        with contextlib.suppress(ValueError):
            datetime.fromisoformat(text)
            return text
        self.fail(f"{text!r} is not a time: use {MOMENT_FORMS}", param, ctx)


def _value_text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _detail_text(detail: dict[str, Any] | None) -> str:
    shown = {k: v for k, v in (detail or {}).items() if v is not None}
    return ", ".join(f"{k}={_value_text(v)}" for k, v in shown.items()) or NONE


@click.group("audit")
def audit() -> None:
    """Read the audit log and verify its hash chain."""


@audit.command("list")
@click.option("--kind", help="e.g. worker.created, job.submitted, auth.failed.")
@click.option("--actor", help="e.g. token:admin#1.")
@click.option("--target", help="A worker or job id, or what a failed request asked for.")
@click.option("--outcome", help="e.g. success, denied.")
@click.option("--since", type=Moment(), help="30m, 2h, 1d ago, or ISO 8601, or unix seconds.")
@click.option("--until", type=Moment(), help="Same forms as --since.")
@click.option("--limit", type=click.IntRange(1, 500), default=100, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0)
@json_option
@connection_options
def list_audit(
    conn: Connection,
    kind: str | None,
    actor: str | None,
    target: str | None,
    outcome: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    """Audit events, newest first (GET /api/audit)."""
    params = {
        "kind": kind,
        "actor": actor,
        "target": target,
        "outcome": outcome,
        "since": since,
        "until": until,
        "limit": limit,
        "offset": offset,
    }
    data = call(conn, lambda api: api.get("/api/audit", params))
    if as_json:
        print_json(data)
        return
    rows = [
        [
            str(e["id"]),
            relative_time(e.get("at")),
            e["kind"],
            e.get("actor") or NONE,
            e.get("target") or NONE,
            e.get("outcome") or NONE,
            _detail_text(e.get("detail")),
        ]
        for e in data["events"]
    ]
    columns = ["ID", "WHEN", "KIND", "ACTOR", "TARGET", "OUTCOME", "DETAIL"]
    # The orchestrator does not count the whole log: its total says only "more or not".
    more = data.get("total", 0) > offset + len(rows)
    footer = f"older events: --offset {offset + len(rows)}" if more else ""
    print_table(columns, rows, "No audit events match.", footer, wrap=("DETAIL", "TARGET"))


@audit.command("verify")
@json_option
@connection_options
def verify_audit(conn: Connection, as_json: bool) -> None:
    """Check the hash chain; exits 1 if it is broken (GET /api/audit/verify)."""
    data = call(conn, lambda api: api.get("/api/audit/verify"))
    if as_json:
        print_json(data)
    elif data.get("ok"):
        click.echo("The audit chain is intact.")
    else:
        click.secho(
            f"The audit chain is broken at event {data.get('first_bad_id')}: that event or "
            "one before it was changed or removed after it was written.",
            fg="red",
        )
    if not data.get("ok"):
        raise click.exceptions.Exit(int(ExitCode.FAILED))
