"""`tunefleet jobs artifacts JOB` and `tunefleet jobs download JOB [KEY]`: a job's stored
outputs, listed, and fetched with a progress bar and their checksum checked."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import click
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TransferSpeedColumn,
)

from tunefleet.cli.options import call, connection_options, json_option
from tunefleet.cli.output import console, print_json, print_table, relative_time
from tunefleet.client import operations as ops
from tunefleet.client.connection import Connection
from tunefleet.client.transport import Transport


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
    data = call(conn, lambda api: ops.list_artifacts(api, job_id))
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

    async def action(api: Transport) -> list[str]:
        listing = await ops.list_artifacts(api, job_id)
        items = ops.select_artifacts(job_id, listing, None if key is None else [key])
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
                task = bar.add_task(item["key"], total=item["size"])
                done = await ops.download_artifact(
                    api, job_id, item, to_dir, partial(bar.advance, task)
                )
                written.append(f"{done.path} ({_size(done.size)}, sha256 {done.sha256[:12]})")
        return written

    for line in call(conn, action):
        click.echo(line)
