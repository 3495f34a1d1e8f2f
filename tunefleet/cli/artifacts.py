"""`tunefleet jobs artifacts JOB` and `tunefleet jobs download JOB [KEY]`: a job's stored
outputs, listed, and fetched with a progress bar and their checksum checked."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TransferSpeedColumn,
)

from tunefleet.cli.client import ApiClient, CliError, Connection
from tunefleet.cli.follow import job_path
from tunefleet.cli.options import call, connection_options, json_option
from tunefleet.cli.output import console, print_json, print_table, relative_time


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


@click.command("artifacts")
@click.argument("job_id")
@json_option
@connection_options
def artifacts(conn: Connection, job_id: str, as_json: bool) -> None:
    """List a job's stored outputs and checkpoints (GET /api/queue/ID/artifacts)."""
    data = call(conn, lambda api: api.get(job_path(job_id, "/artifacts")))
    if as_json:
        print_json(data)
        return
    print_table(
        ["KEY", "SIZE", "SHA-256", "ATTEMPT", "STORED"],
        [
            [a["key"], _size(a["size"]), (a["sha256"] or "-")[:12], str(a["attempt"]),
             relative_time(a["created_at"])]
            for a in data["artifacts"]
        ],
        f"No artifacts stored for {job_id}.",
    )  # fmt: skip
    if data["checkpoints"]:
        names = ", ".join(c["name"] for c in data["checkpoints"])
        click.echo(f"Complete checkpoints (newest first): {names}")


@click.command("download")
@click.argument("job_id")
@click.argument("key", required=False)
@click.option(
    "-o",
    "--to",
    "to_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Folder to write into; keys keep their sub-folders.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@connection_options
def download(conn: Connection, job_id: str, key: str | None, to_dir: Path, quiet: bool) -> None:
    """Download one stored output (KEY), or all of them, checking each SHA-256."""

    async def action(api: ApiClient) -> list[str]:
        listing = await api.get(job_path(job_id, "/artifacts"))
        items: list[dict[str, Any]] = listing["artifacts"]
        if key is not None:
            items = [a for a in items if a["key"] == key]
            if not items:
                raise CliError(f"{job_id} has no artifact {key}; see `tunefleet jobs artifacts`")
        if not items:
            raise CliError(f"{job_id} has no stored artifacts")
        written = []
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=console(stderr=True),
            disable=quiet,
        ) as bar:
            for item in items:
                dest = to_dir.joinpath(*item["key"].split("/"))
                task = bar.add_task(item["key"], total=item["size"])
                path = job_path(job_id, "/artifacts/" + quote(item["key"]))
                size, sha256 = await api.download(path, dest, partial(bar.advance, task))
                if item["sha256"] and sha256 != item["sha256"]:
                    dest.unlink(missing_ok=True)
                    raise CliError(
                        f"{item['key']} arrived with SHA-256 {sha256}, but it was stored with "
                        f"{item['sha256']}; deleted it, download again"
                    )
                written.append(f"{dest} ({_size(size)}, sha256 {sha256[:12]})")
        return written

    for line in call(conn, action):
        click.echo(line)
