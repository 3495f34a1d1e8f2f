"""End to end, the newcomer's install (issue 28): one box, an orchestrator started with its
defaults, no remote worker. The admin's `target: local` and `target: auto` jobs with
`tiny-example` complete, as root and as an ordinary user; the banner's own suggested
submission works as printed; a `queue.local` token of a user who is not an admin gets
the isolated runner or a 400 saying what blocks it (tests/e2e/test_e2e_permissions.py proves
the isolated trainer cannot read the data directory)."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import ADMIN_TOKEN, ApiError, Orchestrator, free_port
from tunefleet.actors.local_access import can_execute
from tunefleet.actors.local_isolation import DEFAULT_ISOLATED_WORK_DIR, default_work_dir
from tunefleet.agent.job_files import RunAs

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

REPO_CONFIGS = Path(__file__).resolve().parents[2] / "configs"
NON_ADMIN = ["queue.submit", "queue.local"]
REFUSED = "target local: a non-admin user's local job runs isolated, and here it cannot: "


def banner(orch: Orchestrator) -> str:
    """What the orchestrator printed at its start (the log's tail may have passed it)."""
    assert orch.log_path is not None
    text = orch.log_path.read_text(errors="replace")
    return text[: text.index("  Submit a job") + 1000]


def banner_submit(orch: Orchestrator) -> str:
    """The banner's suggested submission, continuation lines joined."""
    text = banner(orch).replace("\\\n", " ")
    (line,) = [ln.strip() for ln in text.splitlines() if "/api/queue/submit" in ln]
    return line


def run_the_newcomers_jobs(orch: Orchestrator, work_dir: Path, uid: int) -> list[str]:
    """The banner's submission (tiny-example, auto) and the same with target local: both
    complete on the local runner, in folders of the orchestrator's user. Their ids."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    submitted = subprocess.run(
        ["bash", "-c", banner_submit(orch)],
        env={**os.environ, "ADMIN_TOKEN": ADMIN_TOKEN},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert submitted.returncode == 0, submitted.stderr
    auto_id = json.loads(submitted.stdout)["job_id"]
    local_id = orch.submit(config_name="tiny-example", target="local")["job_id"]
    for job_id in (auto_id, local_id):
        job = orch.wait_job(job_id, {"completed", "failed"}, timeout_s=90)
        assert (job["status"], job["worker_id"]) == ("completed", "w_local"), (job, orch.log())
        job_dir = work_dir / "own-user" / "jobs" / job_id
        assert job_dir.stat().st_uid == uid
    assert orch.job(auto_id)["target"] == "auto"
    return [auto_id, local_id]


def non_admin_local(orch: Orchestrator) -> dict[str, object] | str:
    """`target: local` by a researcher granted queue.local (not an admin: that is the
    user's role, whatever a token holds): the job (isolated) or the 400's detail."""
    user = {"name": "rita", "role": "researcher", "teams": ["default"], "grants": ["queue.local"]}
    orch.request("POST", "/api/admin/users", user)
    body = {"name": "local-only", "user": "rita", "permissions": NON_ADMIN}
    token = orch.request("POST", "/api/admin/tokens", body)["token"]
    try:
        job = orch.request(
            "POST", "/api/queue/submit", {"config_name": "tiny-example", "target": "local"}, token
        )
    except ApiError as refused:
        assert refused.status == 400, refused.body
        return str(refused.body["detail"])
    return orch.wait_job(job["job_id"], {"completed", "failed"}, timeout_s=90)


def remove_job_dirs(work_dir: Path, job_ids: list[str]) -> None:
    for job_id in job_ids:
        for jobs in (work_dir / "own-user" / "jobs", work_dir / "jobs"):
            shutil.rmtree(jobs / job_id, ignore_errors=True)


@pytest.fixture
def fresh_data(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / ".tunefleet"


def test_a_fresh_start_as_root_runs_the_admins_local_and_auto_jobs(fresh_data: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("this is the root half; the non-root half is the next test")
    orch = Orchestrator(fresh_data, REPO_CONFIGS, local_runner=True).start()
    job_ids: list[str] = []
    try:
        assert "local runner: ON for admins (as root); " in banner(orch)
        job_ids = run_the_newcomers_jobs(orch, DEFAULT_ISOLATED_WORK_DIR, 0)
        other = non_admin_local(orch)
        if isinstance(other, str):  # nobody cannot run this Python: the banner said why
            assert other.startswith(REFUSED), other
            blocked = other.removeprefix(REFUSED).split(". The operator can ")[0]
            assert f"others' local jobs are refused: {blocked}; " in banner(orch)
        else:
            assert other["status"] == "completed", other
            job_ids.append(str(other["job_id"]))
    finally:
        orch.stop()
        remove_job_dirs(DEFAULT_ISOLATED_WORK_DIR, job_ids)


@pytest.fixture
def throwaway_user() -> Iterator[RunAs]:
    """An ordinary account made for this test and removed after it."""
    if os.geteuid() != 0:
        pytest.skip("making a throwaway user needs root")
    for tool in ("useradd", "userdel", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: cannot run an orchestrator as another user")
    name = f"tf-e2e-{secrets.token_hex(3)}"
    made = subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"useradd failed: {made.stderr.strip()}")
    entry = pwd.getpwnam(name)
    try:
        yield RunAs(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)


def as_user(user: RunAs) -> list[str]:
    """setpriv's prefix that runs a command as ``user``. Where this Python lives below a
    folder closed to others (pyenv under /root, 0700), the user is also given read access
    to files it could not otherwise reach (CAP_DAC_READ_SEARCH, ambient): it is still not
    root, which is all the orchestrator's choice looks at, and cannot start processes as
    anyone else."""
    prefix = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups"]
    if not can_execute(user, sys.executable):
        prefix += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
        probe = subprocess.run(
            [*prefix, sys.executable, "-c", "import tunefleet"], capture_output=True, timeout=30
        )
        if probe.returncode != 0:
            pytest.skip(f"user {user.name} cannot run {sys.executable}, even with read access")
    return prefix


def test_a_fresh_start_as_an_ordinary_user_runs_the_admins_local_and_auto_jobs(
    throwaway_user: RunAs,
) -> None:
    user = throwaway_user
    base = Path(tempfile.mkdtemp(prefix="tunefleet-user-", dir="/var/tmp"))
    work_dir = default_work_dir(user.uid)
    try:
        base.chmod(0o755)
        data = base / ".tunefleet"
        data.mkdir()
        os.chown(data, user.uid, user.gid)
        orch = Orchestrator(
            data,
            REPO_CONFIGS,
            cwd=base,
            local_runner=True,
            command_prefix=as_user(user),
        ).start()
        try:
            assert (
                f"local runner: ON for admins (as {user.name}); others' local jobs are "
                "refused: the orchestrator is not root, so it cannot start trainers as "
                "another user; to run them isolated, start it as root, or run "
                "`tunefleet worker` under another account"
            ) in banner(orch)
            run_the_newcomers_jobs(orch, work_dir, user.uid)
            assert non_admin_local(orch) == (
                f"{REFUSED}the orchestrator is not root, so it cannot start trainers as "
                "another user. The operator can start it as root, or run `tunefleet worker` "
                "under another account; else use target worker"
            )
        finally:
            orch.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(work_dir, ignore_errors=True)


def test_a_work_directory_someone_else_owns_stops_the_start_saying_so(tmp_path: Path) -> None:
    """Not "cannot listen": the folder is named, and what to do (the default one of an
    ordinary user is /var/tmp/tunefleet-local-runner-<uid>, which another could make)."""
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    base = Path(tempfile.mkdtemp(prefix="tunefleet-taken-", dir="/var/tmp"))
    try:
        taken = base / "work"
        taken.mkdir()
        os.chown(taken, 65534, 65534)
        args = ["server", "--port", str(free_port()), "--data-dir", str(tmp_path / "data")]
        done = subprocess.run(
            [sys.executable, "-m", "tunefleet", *args, "--local-work-dir", str(taken)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1, done.stdout + done.stderr
        assert (
            f"error: local work directory {taken} is a link or not owned by the "
            "orchestrator's user; remove it or pass another --local-work-dir"
        ) in done.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)
