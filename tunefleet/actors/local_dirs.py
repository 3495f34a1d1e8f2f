"""The local runner's folders on disk: the work directories it makes at start-up, and the
data directory it closes when isolated trainers run (tunefleet/actors/local_isolation.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tunefleet.actors.local_isolation import LocalIsolation
from tunefleet.errors import TunefleetError


def close_data_dir(data_dir: Path) -> None:
    """Mode 0700 on the data directory: the runner user cannot enter it."""
    os.chmod(data_dir, 0o700)


def prepare_work_dirs(isolation: LocalIsolation) -> None:
    """Make the work directory (0755: isolated trainers pass through it) and, for jobs
    that run as the orchestrator's own user, its subfolder (0700: no one else's)."""
    own_folder(isolation.work_dir, 0o755)
    if isolation.runs_unisolated_jobs:
        own_folder(isolation.own_work_dir, 0o700)


class LocalWorkDirError(TunefleetError):
    """The local runner's work directory cannot be had: the server does not start."""


def own_folder(path: Path, mode: int) -> None:
    """``path`` made with ``mode``, owned by this process's user and not a link; one that
    exists with another owner or as a link is refused (someone else could swap it)."""
    try:
        path.mkdir(mode=mode, parents=True, exist_ok=True)
        info = os.lstat(path)
    except OSError as error:
        raise LocalWorkDirError(
            f"cannot make the local work directory {path}: {error.strerror or error}; "
            "pass another --local-work-dir"
        ) from error
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid():
        raise LocalWorkDirError(
            f"local work directory {path} is a link or not owned by the orchestrator's "
            "user; remove it or pass another --local-work-dir"
        )
    os.chmod(path, mode)
