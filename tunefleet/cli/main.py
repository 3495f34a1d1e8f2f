"""The `tunefleet` command: one group, each subcommand in its own module."""

from __future__ import annotations

import click

from tunefleet import __version__
from tunefleet.cli.server import server
from tunefleet.cli.worker import worker


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tunefleet")
def cli() -> None:
    """tunefleet: run GPU training jobs across a fleet of machines."""


cli.add_command(server)
cli.add_command(worker)


def main() -> None:
    cli()
