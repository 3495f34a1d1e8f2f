"""The local runner's executor from the server's options: its command, the commands it
allows, and its isolation (tunefleet/actors/local_isolation.py)."""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

from tunefleet.actors.local_isolation import (
    LocalIsolation,
    close_data_dir,
    plan_isolation,
    prepare_work_dir,
    scrubbed_env,
)
from tunefleet.agent.executor import JobExecutor
from tunefleet.commands import default_patterns, parse_patterns

if TYPE_CHECKING:
    from tunefleet.http.app import ServerOptions

DEFAULT_TRAIN_COMMAND = ["python", "-m", "simpletuner.train"]


def local_train_command(options: ServerOptions) -> list[str]:
    if options.local_train_command:
        return shlex.split(options.local_train_command)
    return list(DEFAULT_TRAIN_COMMAND)


def plan_local(options: ServerOptions) -> LocalIsolation:
    return plan_isolation(
        data_dir=options.data_dir,
        train_command=local_train_command(options),
        user=options.local_runner_user,
        work_dir=options.local_work_dir,
        unisolated=options.local_runner_unisolated,
    )


def local_executor(options: ServerOptions, isolation: LocalIsolation) -> JobExecutor:
    """The executor of an isolated (or explicitly unisolated) local runner; for an
    isolated one, the work directory is made and the data directory closed first."""
    command = local_train_command(options)
    allowed = (
        parse_patterns(options.local_allowed_commands)
        if options.local_allowed_commands
        else default_patterns(command)
    )
    if isolation.run_as is not None:
        prepare_work_dir(isolation)
        close_data_dir(options.data_dir)
    return JobExecutor(
        isolation.work_dir,
        command,
        allowed_commands=allowed,
        run_as=isolation.run_as,
        base_env=scrubbed_env(os.environ),
    )
