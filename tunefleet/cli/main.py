"""The `tunefleet` command: one group, each subcommand in its own module."""

from __future__ import annotations

import click

from tunefleet import __version__
from tunefleet.cli.approvals import approvals
from tunefleet.cli.audit import audit
from tunefleet.cli.jobs import jobs
from tunefleet.cli.limits import queue
from tunefleet.cli.quotas import set_quota  # noqa: F401 - declares teams set-quota
from tunefleet.cli.server import server
from tunefleet.cli.tokens import tokens
from tunefleet.cli.usage import usage
from tunefleet.cli.users import teams, users
from tunefleet.cli.webhooks import webhooks
from tunefleet.cli.worker import worker
from tunefleet.cli.workers import workers


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tunefleet")
def cli() -> None:
    """tunefleet: run GPU training jobs across a fleet of machines."""


cli.add_command(server)
cli.add_command(worker)
# Client commands: they talk to an orchestrator over its public HTTP API (docs/cli.md).
cli.add_command(workers)
cli.add_command(jobs)
cli.add_command(tokens)
cli.add_command(users)
cli.add_command(teams)  # set-limits: cli/limits.py; set-quota: cli/quotas.py
cli.add_command(queue)
cli.add_command(audit)
cli.add_command(usage)
cli.add_command(approvals)
cli.add_command(webhooks)


def main() -> None:
    cli()
