"""The local runner's isolation decision, its scrubbed environment and its work folder,
without starting an orchestrator (tests/e2e/test_e2e_permissions.py runs one)."""

from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path

import pytest

from tunefleet.actors.local_isolation import (
    DEFAULT_ISOLATED_WORK_DIR,
    LocalIsolation,
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
        "unisolated": False,
        "euid": 0,
        "executable": yes,
    }
    values.update(overrides)
    return plan_isolation(**values)  # type: ignore[arg-type]


def test_as_root_trainers_run_as_nobody_outside_the_data_directory(tmp_path: Path) -> None:
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this machine has no user nobody")
    decided = plan(tmp_path)
    assert decided.run_as == RunAs("nobody", nobody.pw_uid, nobody.pw_gid)
    assert decided.off_reason is None
    assert decided.work_dir == DEFAULT_ISOLATED_WORK_DIR
    assert decided.banner.startswith("local runner: jobs run as nobody in ")


def test_where_isolation_cannot_be_had_the_runner_is_off_and_says_why(tmp_path: Path) -> None:
    not_root = plan(tmp_path, euid=1000)
    assert not_root.off_reason is not None and "does not run as root" in not_root.off_reason
    assert "--local-runner-unisolated" in not_root.banner
    no_user = plan(tmp_path, user="no-such-user-here")
    assert no_user.off_reason == "there is no user 'no-such-user-here' to run trainers as " + (
        "(--local-runner-user)"
    )
    assert plan(tmp_path, user="root").off_reason == "--local-runner-user 'root' is root"
    if _has_nobody():
        cannot = plan(tmp_path, executable=no)
        assert cannot.off_reason == (
            "user 'nobody' cannot execute the local train command's program /bin/sh "
            "(a directory on its path is closed to others?)"
        )
        inside = plan(tmp_path, work_dir=tmp_path / "data" / "work")
        assert inside.off_reason is not None and "is inside the data directory" in inside.off_reason


def test_opting_out_runs_unisolated_in_the_data_directory_and_says_so(tmp_path: Path) -> None:
    decided = plan(tmp_path, euid=1000, unisolated=True)
    assert (decided.run_as, decided.off_reason) == (None, None)
    assert decided.work_dir == tmp_path / "data" / "local-runner"
    assert decided.banner.startswith("local runner: UNISOLATED")


def _has_nobody() -> bool:
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return False
    return os.name == "posix"
