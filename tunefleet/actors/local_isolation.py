"""Keeping the local runner's trainers away from the control plane.

A local job runs on the orchestrator's machine, next to its database, audit log, TLS key
and credentials. When the orchestrator runs as root, trainers run as an unprivileged
user (``--local-runner-user``, default ``nobody``) in a work directory outside the data
directory, which is closed to others (mode 0700); and always with an environment
scrubbed of the orchestrator's secrets. Where that cannot be had (not root, no such
user, or that user cannot execute the local train command's program), the local runner
does not start unless the operator opts in with ``--local-runner-unisolated``; the
start-up banner says which and why (docs/operations.md, "Who can run what").
"""

from __future__ import annotations

import fnmatch
import os
import pwd
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tunefleet.agent.job_files import RunAs

DEFAULT_RUNNER_USER = "nobody"
# Outside any home directory (often 0700) and the data directory, so the runner user can
# reach it; made by root, 0755.
DEFAULT_ISOLATED_WORK_DIR = Path("/var/tmp/tunefleet-local-runner")
# The orchestrator's own credentials and settings, which a trainer has no business with.
SECRET_ENV_GLOBS: tuple[str, ...] = (
    "TUNEFLEET_*",
    "SIMPLETUNER_*",
    "ADMIN_TOKEN",
    "DATABASE_URL",
    "PG*",
    "AWS_*",
    "*TOKEN*",
    "*PASSWORD*",
    "*SECRET*",
    "*CREDENTIALS*",
    "*_API_KEY",
    "*PRIVATE_KEY*",
)
_PYTHONS = frozenset({"python", "python3"})

UNISOLATED_HINT = (
    "pass --local-runner-unisolated to run local jobs as the orchestrator's own user "
    "anyway (only if everyone holding queue.local may also control the orchestrator), or "
    "run `tunefleet worker` under a separate account instead"
)


@dataclass(frozen=True, slots=True)
class LocalIsolation:
    """How the local runner runs trainers, decided once at start-up."""

    run_as: RunAs | None  # None: as the orchestrator's own user
    work_dir: Path
    off_reason: str | None  # set: the local runner does not start, and this says why
    banner: str  # one line for the start-up message


def scrubbed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the orchestrator's secrets (SECRET_ENV_GLOBS, any case)."""
    return {
        name: value
        for name, value in environ.items()
        if not any(fnmatch.fnmatchcase(name.upper(), glob) for glob in SECRET_ENV_GLOBS)
    }


def program_of(command: Sequence[str]) -> str | None:
    """The file the command starts: ``python`` is this interpreter (the executor's rule),
    a bare name is looked up on PATH; None when it cannot be found."""
    if not command:
        return None
    first = command[0]
    if first in _PYTHONS:
        return sys.executable
    if "/" in first:
        return first
    return shutil.which(first)


def can_execute(run_as: RunAs, program: str) -> bool:
    """Whether ``run_as`` may execute ``program`` (every directory on its path searchable
    and the file executable), asked of the kernel as that user: `test -x` under its uid."""
    tester = shutil.which("test") or "/usr/bin/test"
    try:
        done = subprocess.run(
            [tester, "-x", program],
            user=run_as.uid,
            group=run_as.gid,
            extra_groups=[],
            env={},
            timeout=10,
            check=False,
            capture_output=True,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def plan_isolation(
    *,
    data_dir: Path,
    train_command: Sequence[str],
    user: str | None,
    work_dir: Path | None,
    unisolated: bool,
    euid: int | None = None,
    executable: Callable[[RunAs, str], bool] = can_execute,
) -> LocalIsolation:
    """Decide how the local runner runs trainers. Nothing is changed on disk here."""
    shared_dir = work_dir or data_dir / "local-runner"
    if unisolated:
        return LocalIsolation(
            None,
            shared_dir,
            None,
            "local runner: UNISOLATED (--local-runner-unisolated): local jobs run as this "
            "user and can read the data directory",
        )
    why = _why_not(data_dir, train_command, user, work_dir, euid, executable)
    if isinstance(why, str):
        return LocalIsolation(
            None,
            shared_dir,
            why,
            f"local runner: OFF, {why}; {UNISOLATED_HINT}",
        )
    isolated_dir = work_dir or DEFAULT_ISOLATED_WORK_DIR
    return LocalIsolation(
        why,
        isolated_dir,
        None,
        f"local runner: jobs run as {why.name} in {isolated_dir}, without access to the "
        "data directory",
    )


def _why_not(
    data_dir: Path,
    train_command: Sequence[str],
    user: str | None,
    work_dir: Path | None,
    euid: int | None,
    executable: Callable[[RunAs, str], bool],
) -> RunAs | str:
    """The user to run trainers as, or why there is none."""
    if (os.geteuid() if euid is None else euid) != 0:
        return (
            "the orchestrator does not run as root, so it cannot run trainers as another "
            "user and they could read its data directory"
        )
    name = user or DEFAULT_RUNNER_USER
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return f"there is no user {name!r} to run trainers as (--local-runner-user)"
    if entry.pw_uid == 0:
        return f"--local-runner-user {name!r} is root"
    run_as = RunAs(name, entry.pw_uid, entry.pw_gid)
    if work_dir is not None and _inside(work_dir, data_dir):
        return f"--local-work-dir {work_dir} is inside the data directory {data_dir}"
    program = program_of(train_command)
    if program is None:
        return f"the local train command's program {train_command[0]!r} is not found"
    if not executable(run_as, program):
        return (
            f"user {name!r} cannot execute the local train command's program {program} "
            "(a directory on its path is closed to others?)"
        )
    return run_as


def _inside(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True


def close_data_dir(data_dir: Path) -> None:
    """Mode 0700 on the data directory: the runner user cannot enter it."""
    os.chmod(data_dir, 0o700)


def prepare_work_dir(isolation: LocalIsolation) -> None:
    """Make the isolated work directory: owned by root, 0755, not a link. One that
    exists with another owner or as a link is refused (someone else could swap it)."""
    path = isolation.work_dir
    path.mkdir(mode=0o755, parents=True, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid():
        raise PermissionError(
            f"local work directory {path} is a link or not owned by the orchestrator's "
            "user; remove it or pass another --local-work-dir"
        )
    os.chmod(path, 0o755)
