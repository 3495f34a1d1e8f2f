"""Keeping the local runner's trainers away from the control plane, for those it matters to.

A local job runs on the orchestrator's machine, next to its database, audit log, TLS key
and credentials. Isolation protects the orchestrator from submitters who may run local
jobs but do not control it. So it is decided per job (issue 28), from what its submission
recorded (``JobRecord.local_unisolated``):

- a job whose submitter already controls the orchestrator (``controls_orchestrator``)
  runs as the orchestrator's own user: it gains nothing it did not have;
- anyone else's runs as an unprivileged user (``--local-runner-user``, default
  ``nobody``) in a work directory outside the data directory, which is closed to others
  (mode 0700); that needs root, a user and a trainer that user can execute, and where
  one is missing such a job is refused at submit, saying why and what the operator can do.

Every trainer gets an environment scrubbed of the orchestrator's secrets and a work
directory outside the data directory. ``--local-runner-unisolated`` runs every local job
as the orchestrator's user; ``--local-runner-isolated-only`` none (docs/operations.md,
"Who can run what").
"""

from __future__ import annotations

import enum
import fnmatch
import os
import pwd
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tunefleet.actors.local_access import Blocked, Executable, can_execute, execute_blocked
from tunefleet.actors.local_access import program_of as program_of
from tunefleet.agent.job_files import RunAs

DEFAULT_RUNNER_USER = "nobody"
# Outside any home directory (often 0700) and the data directory, so the runner user can
# reach it; made by root, 0755. Not root: the same with the user id after it.
DEFAULT_ISOLATED_WORK_DIR = Path("/var/tmp/tunefleet-local-runner")
# Under the work directory, mode 0700: the jobs that run as the orchestrator's own user.
OWN_USER_SUBDIR = "own-user"
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


class LocalMode(enum.Enum):
    """Who runs unisolated: the submitters who control the orchestrator (the default),
    everyone (``--local-runner-unisolated``) or no one (``--local-runner-isolated-only``)."""

    PER_SUBMITTER = "per-submitter"
    UNISOLATED = "unisolated"
    ISOLATED_ONLY = "isolated-only"


@dataclass(frozen=True, slots=True)
class LocalIsolation:
    """How the local runner runs trainers: decided at start-up, applied per job."""

    mode: LocalMode
    own_user: str  # the orchestrator's user, as which unisolated jobs run
    run_as: RunAs | None  # isolated jobs' user; None: isolation is not to be had
    blocked: Blocked | None  # why not, when it was wanted
    work_dir: Path  # isolated jobs' directories
    own_work_dir: Path  # the directories of jobs run as the orchestrator's own user

    @property
    def off_reason(self) -> str | None:
        """Why the local runner does not start at all: isolated only, and it cannot be."""
        if self.mode is LocalMode.ISOLATED_ONLY and self.blocked is not None:
            return f"{self.blocked.why} (--local-runner-isolated-only); {self.blocked.fix}"
        return None

    @property
    def runs_unisolated_jobs(self) -> bool:
        return self.mode is not LocalMode.ISOLATED_ONLY

    def refusal(self, controls_orchestrator: bool) -> Blocked | None:
        """Why a local job from this submitter cannot run here (at submit); None: it can."""
        if self.mode is LocalMode.UNISOLATED:
            return None
        if self.mode is LocalMode.PER_SUBMITTER and controls_orchestrator:
            return None
        return self.blocked

    def runs_unisolated(self, recorded: bool) -> bool | str:
        """For a job about to run, from what its submission recorded: True to run as the
        orchestrator's user, False isolated, or why it can be neither (the flags changed
        since it was submitted)."""
        if self.mode is LocalMode.UNISOLATED:
            return True
        if recorded and self.mode is LocalMode.PER_SUBMITTER:
            return True
        if self.run_as is not None:
            return False
        reason = self.blocked.why if self.blocked is not None else "isolation is off"
        return f"this job must run isolated from the orchestrator, and {reason}"

    @property
    def banner(self) -> str:
        """One line for the start-up message."""
        isolated = f"as {self.run_as.name} in {self.work_dir}" if self.run_as is not None else ""
        if self.mode is LocalMode.UNISOLATED:
            return (
                f"local runner: UNISOLATED (--local-runner-unisolated): every local job runs "
                f"as {self.own_user} in {self.own_work_dir} and can read the data directory"
            )
        if self.mode is LocalMode.ISOLATED_ONLY:
            if self.off_reason is not None:
                return f"local runner: OFF, {self.off_reason}"
            return (
                "local runner: ON, isolated only (--local-runner-isolated-only): local jobs "
                f"run {isolated}, without access to the data directory"
            )
        admins = f"local runner: ON for admins (as {self.own_user}"
        if self.blocked is not None:
            return (
                f"{admins}); others' local jobs are refused: {self.blocked.why}; to run "
                f"them isolated, {self.blocked.fix}"
            )
        return f"{admins}); isolated {isolated} for others"


def scrubbed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the orchestrator's secrets (SECRET_ENV_GLOBS, any case)."""
    return {
        name: value
        for name, value in environ.items()
        if not any(fnmatch.fnmatchcase(name.upper(), glob) for glob in SECRET_ENV_GLOBS)
    }


def default_work_dir(euid: int) -> Path:
    """Root's is shared with the runner user; anyone else's is their own."""
    if euid == 0:
        return DEFAULT_ISOLATED_WORK_DIR
    return DEFAULT_ISOLATED_WORK_DIR.with_name(f"{DEFAULT_ISOLATED_WORK_DIR.name}-{euid}")


def plan_isolation(
    *,
    data_dir: Path,
    train_command: Sequence[str],
    user: str | None,
    work_dir: Path | None,
    mode: LocalMode = LocalMode.PER_SUBMITTER,
    euid: int | None = None,
    executable: Executable = can_execute,
) -> LocalIsolation:
    """Decide how the local runner runs trainers. Nothing is changed on disk here."""
    euid = os.geteuid() if euid is None else euid
    work_dir = work_dir or default_work_dir(euid)
    decided = LocalIsolation(
        mode, _user_name(euid), None, None, work_dir, work_dir / OWN_USER_SUBDIR
    )
    if mode is LocalMode.UNISOLATED:
        return decided
    found = _runner_user(data_dir, train_command, user, work_dir, euid, executable)
    if isinstance(found, Blocked):
        return LocalIsolation(mode, decided.own_user, None, found, work_dir, decided.own_work_dir)
    return LocalIsolation(mode, decided.own_user, found, None, work_dir, decided.own_work_dir)


def _runner_user(
    data_dir: Path,
    train_command: Sequence[str],
    user: str | None,
    work_dir: Path,
    euid: int,
    executable: Executable,
) -> RunAs | Blocked:
    """The user to run isolated trainers as, or why there is none."""
    if euid != 0:
        return Blocked(
            "the orchestrator is not root, so it cannot start trainers as another user",
            "start it as root, or run `tunefleet worker` under another account",
        )
    name = user or DEFAULT_RUNNER_USER
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return Blocked(
            f"there is no user {name!r} (--local-runner-user)",
            f"create it with `useradd --system {name}`",
        )
    if entry.pw_uid == 0:
        return Blocked(
            f"--local-runner-user {name!r} is root", "pass an unprivileged --local-runner-user"
        )
    if _inside(work_dir, data_dir):
        return Blocked(
            f"--local-work-dir {work_dir} is inside the data directory {data_dir}",
            "pass a --local-work-dir outside it",
        )
    run_as = RunAs(name, entry.pw_uid, entry.pw_gid)
    program = program_of(train_command)
    if program is None:
        return Blocked(
            f"the local train command's program {train_command[0]!r} is not found",
            "install it, or pass --local-train-command with its full path",
        )
    return execute_blocked(run_as, program, executable) or run_as


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _inside(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True
