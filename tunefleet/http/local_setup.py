"""The local runner's executors from the server's options: its command, the commands it
allows, and its isolation (tunefleet/actors/local_isolation.py)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from tunefleet.actors.local_dirs import close_data_dir, prepare_work_dirs
from tunefleet.actors.local_executors import LocalExecutors
from tunefleet.actors.local_isolation import (
    LocalIsolation,
    LocalMode,
    plan_isolation,
    scrubbed_env,
)
from tunefleet.agent.executor import JobExecutor
from tunefleet.agent.job_files import RunAs
from tunefleet.commands import default_patterns, parse_patterns

if TYPE_CHECKING:
    from tunefleet.http.app import ServerOptions
    from tunefleet.storage.store import Store

DEFAULT_TRAIN_COMMAND = ["python", "-m", "simpletuner.train"]


def local_train_command(options: ServerOptions) -> list[str]:
    if options.local_train_command:
        return shlex.split(options.local_train_command)
    return list(DEFAULT_TRAIN_COMMAND)


def local_mode(options: ServerOptions) -> LocalMode:
    if options.local_runner_unisolated:
        return LocalMode.UNISOLATED
    if options.local_runner_isolated_only:
        return LocalMode.ISOLATED_ONLY
    return LocalMode.PER_SUBMITTER


def plan_local(options: ServerOptions) -> LocalIsolation:
    return plan_isolation(
        data_dir=options.data_dir,
        train_command=local_train_command(options),
        user=options.local_runner_user,
        work_dir=options.local_work_dir,
        mode=local_mode(options),
    )


def local_executors(
    options: ServerOptions, isolation: LocalIsolation, store: Store
) -> LocalExecutors:
    """The executors of a local runner that starts: the work directories are made first,
    and the data directory closed where isolated trainers may run."""
    command = local_train_command(options)
    allowed = (
        parse_patterns(options.local_allowed_commands)
        if options.local_allowed_commands
        else default_patterns(command)
    )
    prepare_work_dirs(isolation)
    if isolation.run_as is not None:
        close_data_dir(options.data_dir)

    def executor(work_dir: Path, run_as: RunAs | None) -> JobExecutor:
        return JobExecutor(
            work_dir,
            command,
            allowed_commands=allowed,
            run_as=run_as,
            base_env=scrubbed_env(os.environ),
        )

    async def recorded_unisolated(job_id: str) -> bool:
        row = await store.get_job(job_id)
        return row is not None and bool(row.local_unisolated)

    own = isolation.own_work_dir
    return LocalExecutors(
        isolation,
        own_user=executor(own, None) if isolation.runs_unisolated_jobs else None,
        isolated=executor(isolation.work_dir, isolation.run_as) if isolation.run_as else None,
        recorded_unisolated=recorded_unisolated,
        allowed_commands=allowed,
    )
