"""The local runner's isolation decision, per mode and per submitter, its refusal
messages, its scrubbed environment and the path that blocks the runner user, without
starting an orchestrator (tests/e2e/test_e2e_local_runner.py and
tests/e2e/test_e2e_permissions.py run one)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunefleet.actors.local_access import Blocked, can_execute, execute_blocked
from tunefleet.actors.local_isolation import (
    DEFAULT_ISOLATED_WORK_DIR,
    LocalIsolation,
    LocalMode,
    plan_isolation,
    program_of,
    scrubbed_env,
)
from tunefleet.agent.job_files import RunAs

NOBODY = RunAs("nobody", 65534, 65534)


def yes(_run_as: RunAs, _program: str) -> bool:
    return True


def no(_run_as: RunAs, _program: str) -> bool:
    return False


def test_the_orchestrators_secrets_are_scrubbed_and_the_rest_kept() -> None:
    environ = {
        "TUNEFLEET_DATABASE_URL": "postgresql://u:p@db/tf",
        "TUNEFLEET_ADMIN_TOKEN": "tf_x",
        "ADMIN_TOKEN": "tf_y",
        "SIMPLETUNER_WORKER_TOKEN": "wt_z",
        "DATABASE_URL": "x",
        "PGPASSWORD": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "HF_TOKEN": "x",
        "github_token": "x",
        "MY_SERVICE_PASSWORD": "x",
        "WANDB_API_KEY": "x",
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "CUDA_HOME": "/usr/local/cuda",
    }
    assert scrubbed_env(environ) == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "CUDA_HOME": "/usr/local/cuda",
    }


def test_program_of_follows_the_executors_rules() -> None:
    assert program_of(["python", "-m", "x"]) == sys.executable
    assert program_of(["/bin/sh", "-c", "x"]) == "/bin/sh"
    assert program_of(["sh"]) is not None and program_of(["sh"]).endswith("/sh")  # type: ignore[union-attr]
    assert program_of(["no-such-program-here"]) is None


def plan(tmp_path: Path, **overrides: object) -> LocalIsolation:
    values: dict[str, object] = {
        "data_dir": tmp_path / "data",
        "train_command": ["/bin/sh", "-c", "true"],
        "user": None,
        "work_dir": None,
        "mode": LocalMode.PER_SUBMITTER,
        "euid": 0,
        "executable": yes,
    }
    values.update(overrides)
    return plan_isolation(**values)  # type: ignore[arg-type]


def needs_nobody() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this machine has no user nobody")


def test_by_default_admins_run_as_the_orchestrators_user_and_others_isolated(
    tmp_path: Path,
) -> None:
    nobody = needs_nobody()
    decided = plan(tmp_path)
    assert decided.run_as == RunAs("nobody", nobody.pw_uid, nobody.pw_gid)
    assert (decided.blocked, decided.off_reason) == (None, None)
    assert decided.work_dir == DEFAULT_ISOLATED_WORK_DIR
    assert decided.own_work_dir == DEFAULT_ISOLATED_WORK_DIR / "own-user"
    # At submit: nobody is refused. At run time: the recorded choice is applied.
    assert decided.refusal(True) is None and decided.refusal(False) is None
    assert decided.runs_unisolated(True) is True
    assert decided.runs_unisolated(False) is False
    assert decided.banner == (
        "local runner: ON for admins (as root); isolated as nobody in "
        "/var/tmp/tunefleet-local-runner for others"
    )


def test_where_isolation_cannot_be_had_only_others_are_refused_saying_why(
    tmp_path: Path,
) -> None:
    not_root = plan(tmp_path, euid=1000)
    assert not_root.work_dir == Path("/var/tmp/tunefleet-local-runner-1000")
    assert not_root.off_reason is None  # the runner starts: admins' jobs run
    assert not_root.refusal(True) is None
    assert not_root.refusal(False) == Blocked(
        "the orchestrator is not root, so it cannot start trainers as another user",
        "start it as root, or run `tunefleet worker` under another account",
    )
    assert not_root.runs_unisolated(True) is True
    assert not_root.runs_unisolated(False) == (
        "this job must run isolated from the orchestrator, and the orchestrator is not "
        "root, so it cannot start trainers as another user"
    )
    assert not_root.banner.startswith(
        f"local runner: ON for admins (as {not_root.own_user}); others' local jobs are "
        "refused: the orchestrator is not root"
    )


def test_each_reason_isolation_cannot_be_had_says_what_the_operator_can_do(
    tmp_path: Path,
) -> None:
    needs_nobody()
    cases = {
        "no user": (
            plan(tmp_path, user="no-such-user-here"),
            "there is no user 'no-such-user-here' (--local-runner-user)",
            "create it with `useradd --system no-such-user-here`",
        ),
        "root": (
            plan(tmp_path, user="root"),
            "--local-runner-user 'root' is root",
            "pass an unprivileged --local-runner-user",
        ),
        "inside": (
            plan(tmp_path, work_dir=tmp_path / "data" / "work"),
            f"--local-work-dir {tmp_path / 'data' / 'work'} is inside the data directory "
            f"{tmp_path / 'data'}",
            "pass a --local-work-dir outside it",
        ),
        "no program": (
            plan(tmp_path, train_command=["no-such-trainer-here"]),
            "the local train command's program 'no-such-trainer-here' is not found",
            "install it, or pass --local-train-command with its full path",
        ),
    }
    for case, (decided, why, fix) in cases.items():
        assert decided.blocked == Blocked(why, fix), case
        assert decided.refusal(False) == Blocked(why, fix), case
        assert decided.refusal(True) is None, case


def test_a_closed_directory_on_the_programs_way_is_named_with_its_fix(tmp_path: Path) -> None:
    needs_nobody()
    closed = tmp_path / "home"
    program = closed / "venv" / "python"
    program.parent.mkdir(parents=True)
    program.write_text("")

    def blocked_below_home(_run_as: RunAs, path: str) -> bool:
        return not Path(path).is_relative_to(closed)

    decided = plan(tmp_path, train_command=[str(program)], executable=blocked_below_home)
    assert decided.blocked == Blocked(
        f"user 'nobody' cannot execute {program}: {closed} is closed to others",
        f"run `chmod o+x {closed}`",
    )
    assert f"to run them isolated, run `chmod o+x {closed}`" in decided.banner


def test_opting_everyone_out_runs_every_job_as_the_orchestrators_user(tmp_path: Path) -> None:
    decided = plan(tmp_path, euid=1000, mode=LocalMode.UNISOLATED, executable=no)
    assert (decided.run_as, decided.blocked, decided.off_reason) == (None, None, None)
    assert decided.refusal(False) is None and decided.refusal(True) is None
    assert decided.runs_unisolated(False) is True
    assert decided.own_work_dir == Path("/var/tmp/tunefleet-local-runner-1000/own-user")
    assert decided.banner == (
        f"local runner: UNISOLATED (--local-runner-unisolated): every local job runs as "
        f"{decided.own_user} in /var/tmp/tunefleet-local-runner-1000/own-user and can read "
        "the data directory"
    )


def test_isolated_only_isolates_admins_too_or_keeps_the_runner_off(tmp_path: Path) -> None:
    needs_nobody()
    isolated = plan(tmp_path, mode=LocalMode.ISOLATED_ONLY)
    assert isolated.off_reason is None and not isolated.runs_unisolated_jobs
    assert isolated.runs_unisolated(True) is False
    assert isolated.banner == (
        "local runner: ON, isolated only (--local-runner-isolated-only): local jobs run as "
        "nobody in /var/tmp/tunefleet-local-runner, without access to the data directory"
    )
    off = plan(tmp_path, mode=LocalMode.ISOLATED_ONLY, euid=1000)
    assert off.off_reason == (
        "the orchestrator is not root, so it cannot start trainers as another user "
        "(--local-runner-isolated-only); start it as root, or run `tunefleet worker` under "
        "another account"
    )
    assert off.refusal(True) is not None
    assert off.banner == f"local runner: OFF, {off.off_reason}"


# --- the kernel's answer, as the runner user ----------------------------------------------


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A folder under /var/tmp that others may pass through (pytest's tmp_path sits under
    a 0700 folder, which would block nobody whatever the test builds below it)."""
    if os.geteuid() != 0:
        pytest.skip("asking as another user needs root")
    needs_nobody()
    base = Path(tempfile.mkdtemp(prefix="tunefleet-access-", dir="/var/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_a_link_into_a_closed_home_names_the_home_and_its_fix_works(open_base: Path) -> None:
    """The venv case: an open folder's python is a link to an interpreter under a home
    that is closed (mode 0700). The fix printed, run as printed, opens the way."""
    nobody = needs_nobody()
    run_as = RunAs("nobody", nobody.pw_uid, nobody.pw_gid)
    home = open_base / "home"
    interpreter = home / "pyenv" / "bin" / "python3.11"
    interpreter.parent.mkdir(parents=True)
    interpreter.write_text("#!/bin/sh\n")
    interpreter.chmod(0o755)
    (home / "pyenv").chmod(0o755)
    (home / "pyenv" / "bin").chmod(0o755)
    home.chmod(0o700)
    venv_bin = open_base / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    venv_bin.chmod(0o755)
    (open_base / "venv").chmod(0o755)
    link = venv_bin / "python3"
    link.symlink_to(interpreter)

    blocked = execute_blocked(run_as, str(link), can_execute)
    assert blocked is not None
    assert blocked.why.endswith(f"{link}: {home} is closed to others")
    command = blocked.fix.split("`")[1]
    assert command == f"chmod o+x {home}"
    subprocess.run(command, shell=True, check=True)
    assert execute_blocked(run_as, str(link), can_execute) is None


def test_a_program_closed_to_others_is_named_itself(open_base: Path) -> None:
    nobody = needs_nobody()
    run_as = RunAs("nobody", nobody.pw_uid, nobody.pw_gid)
    program = open_base / "trainer"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o700)
    blocked = execute_blocked(run_as, str(program), can_execute)
    assert blocked is not None
    assert blocked.why.endswith(f"{program}: {program} is not executable by others")
    assert blocked.fix == f"run `chmod o+rx {program}`"
