"""Can the local runner's isolated user run the trainer? Asked of the kernel, as that user.

When it cannot, the answer names the one path in the way and the one command that opens
it (issue 28): the usual case is a virtual environment whose Python lives under a home
directory closed to others (pyenv under ``/root``, mode 0700).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tunefleet.agent.job_files import RunAs

_PYTHONS = frozenset({"python", "python3"})

# Whether a user may execute (a file) or search (a directory) this path.
Executable = Callable[[RunAs, str], bool]


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why local jobs cannot run isolated here, and what the operator can do about it."""

    why: str
    fix: str


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


def can_execute(run_as: RunAs, path: str) -> bool:
    """Whether ``run_as`` may execute ``path`` (search it, for a directory), every
    directory on the way included: `test -x` run under its uid, with no extra groups."""
    tester = shutil.which("test") or "/usr/bin/test"
    try:
        done = subprocess.run(
            [tester, "-x", path],
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


def execute_blocked(run_as: RunAs, program: str, executable: Executable) -> Blocked | None:
    """None when ``run_as`` can execute ``program``; else what is in the way and its fix."""
    if executable(run_as, program):
        return None
    why = f"user {run_as.name!r} cannot execute {program}"
    for path in _path_walk(program):
        if not executable(run_as, str(path)):
            if path.is_dir():
                # Search, not read: others may pass through it, not list it.
                return Blocked(
                    f"{why}: {path} is closed to others",
                    f"run `chmod o+x {shlex.quote(str(path))}`",
                )
            return Blocked(
                f"{why}: {path} is not executable by others",
                f"run `chmod o+rx {shlex.quote(str(path))}`",
            )
    return Blocked(
        why,
        "install the trainer where that user can execute it (a venv under /opt, say)",
    )


def _path_walk(program: str) -> list[Path]:
    """Each directory the kernel passes through to reach ``program``, then the file: the
    path as written and then, where links lead elsewhere, its resolved form."""
    walked: list[Path] = []
    for path in (Path(os.path.abspath(program)), Path(os.path.realpath(program))):
        for step in [*reversed(path.parents), path]:
            if step not in walked:
                walked.append(step)
    # Directories first: the file's own bits matter only once the way to it is open.
    return [p for p in walked if p.is_dir()] + [p for p in walked if not p.is_dir()]
