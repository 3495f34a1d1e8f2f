"""The local runner decides per job whose user a trainer runs as (issue 28): an admin's
job as the orchestrator's own user, anyone else's isolated as the runner user, or, where
that cannot be had, refused at submit with a 400 that says why and what to do. The
choice is recorded on the job, so it outlives a restart.

In-process, with real trainer processes. The tests that start trainers as another user
need root and the user nobody, and work under /var/tmp (pytest's tmp_path sits below a
0700 folder, which would block nobody whatever tunefleet does)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tunefleet.actors.local_access import Blocked
from tunefleet.http.local_target import refusal_detail

pytestmark = pytest.mark.timeout(60)

NO_USER = "no-such-user-here"
SUBMIT_LOCAL = ("queue.submit", "queue.command", "queue.local")
GRANTS = ["queue.command", "queue.local"]
# What the trainer says about itself: user, folder, and whether a secret reached it.
WHO = (
    "import os; print('uid', os.geteuid()); print('cwd', os.getcwd()); "
    "print('secret', os.environ.get('TUNEFLEET_ADMIN_TOKEN', 'unset'))"
)
SH_WHO = "echo uid $(id -u); echo cwd $(pwd); echo secret ${TUNEFLEET_ADMIN_TOKEN:-unset}"


async def others_token(server: Any) -> str:
    """A token of a user who does not control the orchestrator: a researcher granted
    queue.command and queue.local. (Whoever controls it is a user whose role is admin,
    whatever one of their tokens holds, so the admin's narrowed tokens would not do.)"""
    body = {"name": "rita", "role": "researcher", "teams": ["default"], "grants": GRANTS}
    await server.ok("POST", "/api/admin/users", body)
    token = {"name": "rita-laptop", "user": "rita", "permissions": list(SUBMIT_LOCAL)}
    return str((await server.ok("POST", "/api/admin/tokens", token))["token"])


async def run_local(server: Any, command: list[str], token: str | None = None) -> dict[str, str]:
    """Submit ``command`` to the local runner, wait for it to complete; what it printed."""
    headers = server.admin if token is None else server.bearer(token)
    body = {"config": {"lr": 1}, "target": "local", "command": command}
    resp = await server.client.post("/api/queue/submit", json=body, headers=headers)
    assert resp.status == 200, await resp.json()
    job_id = (await resp.json())["job_id"]
    job = await server.wait_job(job_id, "completed")
    logs = await server.ok("GET", f"/api/queue/{job_id}/logs")
    said = dict(line["line"].split(" ", 1) for line in logs["lines"] if " " in line["line"])
    return {**said, "job_id": job_id, "worker_id": job["worker_id"]}


async def test_an_admins_local_job_runs_as_the_orchestrators_user_where_others_cannot_run(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No isolation to be had (no such runner user): before issue 28 the local runner was
    off for everyone; the admin's job now runs, as this user, in its own folder outside
    the data directory, without the orchestrator's secrets."""
    monkeypatch.setenv("TUNEFLEET_ADMIN_TOKEN", "tf_secret-of-the-orchestrator")
    server = await make_server(
        local_runner=True, local_allowed_commands=("**",), local_runner_user=NO_USER
    )
    said = await run_local(server, [sys.executable, "-c", WHO])
    assert said["uid"] == str(os.geteuid())
    own = tmp_path / "local-work" / "own-user"
    assert Path(said["cwd"]).is_relative_to(own), said
    assert said["secret"] == "unset"
    assert stat.S_IMODE(own.stat().st_mode) == 0o700
    row = await server.store.get_job(said["job_id"])
    assert row is not None and row.local_unisolated is True


async def test_anothers_local_job_is_refused_where_it_cannot_run_isolated(
    make_server: Any,
) -> None:
    server = await make_server(
        local_runner=True, local_allowed_commands=("**",), local_runner_user=NO_USER
    )
    token = await others_token(server)
    resp = await server.client.post(
        "/api/queue/submit",
        json={"config_name": "tiny", "target": "local"},
        headers=server.bearer(token),
    )
    assert resp.status == 400
    assert (await resp.json())["detail"] == (
        "target local: a non-admin user's local job runs isolated, and here it cannot: "
        f"there is no user '{NO_USER}' (--local-runner-user). The operator can create it "
        f"with `useradd --system {NO_USER}`; else use target worker"
    )
    assert (await server.ok("GET", "/api/queue"))["total"] == 0  # nothing queued
    # auto may not fall back to a local run it could not have: it waits for a worker.
    resp = await server.client.post(
        "/api/queue/submit", json={"config_name": "tiny"}, headers=server.bearer(token)
    )
    job = await server.job((await resp.json())["job_id"])
    assert (job["status"], job["target"], job["worker_id"]) == ("pending", "worker", None)
    # The admin's auto job falls back to the local runner.
    admins = await server.submit(config={"lr": 1}, command=[sys.executable, "-c", "pass"])
    assert (await server.wait_job(admins["job_id"], "completed"))["worker_id"] == "w_local"


def test_the_refusal_says_why_and_what_the_operator_can_do() -> None:
    detail = refusal_detail(Blocked("WHY", "run `chmod o+x /root`"))
    assert detail == (
        "target local: a non-admin user's local job runs isolated, and here it cannot: "
        "WHY. The operator can run `chmod o+x /root`; else use target worker"
    )


async def test_isolated_only_with_no_isolation_keeps_the_runner_off_for_admins_too(
    make_server: Any,
) -> None:
    server = await make_server(
        local_runner=True, local_runner_user=NO_USER, local_runner_isolated_only=True
    )
    resp = await server.post("/api/queue/submit", {"config_name": "tiny", "target": "local"})
    assert resp.status == 400
    assert (await resp.json())["detail"] == (
        f"target local, but the local runner is off: there is no user '{NO_USER}' "
        "(--local-runner-user) (--local-runner-isolated-only); create it with "
        f"`useradd --system {NO_USER}`; use target worker or auto"
    )


async def test_unisolated_runs_everyones_local_job_as_the_orchestrators_user(
    make_server: Any, tmp_path: Path
) -> None:
    server = await make_server(
        local_runner=True, local_allowed_commands=("**",), local_runner_unisolated=True
    )
    token = await others_token(server)
    said = await run_local(server, [sys.executable, "-c", WHO], token)
    assert said["uid"] == str(os.geteuid())
    assert Path(said["cwd"]).is_relative_to(tmp_path / "local-work" / "own-user")
    row = await server.store.get_job(said["job_id"])
    assert row is not None and row.local_unisolated is False  # the submitter's due, kept


async def test_the_recorded_choice_outlives_a_restart_under_other_flags(
    make_server: Any,
) -> None:
    """Queued while the local runner was off; after a restart where no isolation can be
    had, the admin's job runs and the other's fails saying why, without its principal."""
    first = await make_server(local_runner=False)
    token = await others_token(first)
    body = {"config": {"lr": 1}, "command": [sys.executable, "-c", "pass"]}
    others = await first.client.post("/api/queue/submit", json=body, headers=first.bearer(token))
    others_id = (await others.json())["job_id"]
    admins_id = (await first.submit(**body))["job_id"]
    await first.client.close()

    second = await make_server(
        local_runner=True, local_allowed_commands=("**",), local_runner_user=NO_USER
    )
    assert (await second.wait_job(admins_id, "completed"))["worker_id"] == "w_local"
    failed = await second.wait_job(others_id, "failed")
    assert failed["error"] == (
        "refused by this worker: this job must run isolated from the orchestrator, and "
        f"there is no user '{NO_USER}' (--local-runner-user)"
    )


# --- as another user: root and nobody ------------------------------------------------------


@pytest.fixture
def open_base() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("running trainers as another user needs an orchestrator running as root")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this machine has no user nobody to run trainers as")
    base = Path(tempfile.mkdtemp(prefix="tunefleet-local-", dir="/var/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def sh_runner(base: Path, **options: Any) -> dict[str, Any]:
    return {
        "local_runner": True,
        "local_train_command": "/bin/sh -c true",
        "local_allowed_commands": ("/bin/sh -c **",),
        "local_work_dir": base / "work",
        **options,
    }


async def test_one_runner_runs_the_admins_job_as_root_and_anothers_as_nobody(
    make_server: Any, open_base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNEFLEET_ADMIN_TOKEN", "tf_secret-of-the-orchestrator")
    server = await make_server(**sh_runner(open_base))
    nobody = pwd.getpwnam("nobody").pw_uid
    token = await others_token(server)
    others = await run_local(server, ["/bin/sh", "-c", SH_WHO], token)
    assert (others["uid"], others["secret"]) == (str(nobody), "unset")
    assert Path(others["cwd"]).is_relative_to(open_base / "work" / "jobs")
    admins = await run_local(server, ["/bin/sh", "-c", SH_WHO])
    assert (admins["uid"], admins["secret"]) == ("0", "unset")
    assert Path(admins["cwd"]).is_relative_to(open_base / "work" / "own-user" / "jobs")
    assert stat.S_IMODE(server.data_dir.stat().st_mode) == 0o700


async def test_isolated_only_runs_the_admins_job_as_nobody_too(
    make_server: Any, open_base: Path
) -> None:
    server = await make_server(**sh_runner(open_base, local_runner_isolated_only=True))
    said = await run_local(server, ["/bin/sh", "-c", SH_WHO])
    assert said["uid"] == str(pwd.getpwnam("nobody").pw_uid)
    assert not (open_base / "work" / "own-user").exists()
