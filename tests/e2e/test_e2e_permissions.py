"""End to end, who can run what: a real orchestrator (with its local runner) and real
agents. A ``queue.submit``-only token cannot choose the program anywhere nor run anything
on the orchestrator's machine; a marker file proves nothing ran. With ``queue.command``
and ``queue.local`` it can, but the local trainer cannot read the data directory. An
agent runs only its ``--allowed-commands``."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import ADMIN_TOKEN, Agent, ApiError, Orchestrator, write_tiny_config
from tests.e2e.test_e2e_fleet import start_agent

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[Orchestrator]:
    configs = tmp_path / "configs"
    write_tiny_config(configs, "quick", max_train_steps=5, step_seconds=0.01)
    allow = ["sh -c **", "python -m tunefleet.examples.tiny_trainer"]
    extra = [arg for pattern in allow for arg in ("--local-allowed-commands", pattern)]
    # The admin's local jobs run as the orchestrator's user, whether or not this machine
    # lets nobody run its Python (isolation: the test below).
    extra += ["--local-work-dir", str(tmp_path / "local-work")]
    orch = Orchestrator(tmp_path / "data", configs, local_runner=True, extra_args=extra).start()
    yield orch
    orch.stop()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.stop()


def token_with(orch: Orchestrator, *permissions: str) -> str:
    body = {"name": "-".join(p.split(".")[1] for p in permissions), "permissions": permissions}
    return str(orch.request("POST", "/api/admin/tokens", body)["token"])


def researcher_token(orch: Orchestrator, *permissions: str) -> str:
    """A token of the researcher rita, granted queue.command and queue.local: someone who
    may run local jobs but does not control the orchestrator (the admin user's own tokens
    do, however narrowed: that is the user's role)."""
    grants = ["queue.command", "queue.local"]
    user = {"name": "rita", "role": "researcher", "teams": ["default"], "grants": grants}
    try:
        orch.request("POST", "/api/admin/users", user)
    except ApiError as exists:  # the same data directory, started again
        assert exists.status == 409, exists.body
    body = {"name": "rita-laptop", "user": "rita", "permissions": permissions}
    return str(orch.request("POST", "/api/admin/tokens", body)["token"])


def refused(orch: Orchestrator, token: str, body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ApiError) as caught:
        orch.request("POST", "/api/queue/submit", body, token=token)
    assert caught.value.status == 403, caught.value.body
    return caught.value.body


def test_submit_only_token_runs_no_chosen_command_and_nothing_locally(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path
) -> None:
    orch = orchestrator
    marker = tmp_path / "marker"
    touch = ["sh", "-c", f"touch {marker}; id"]
    token = token_with(orch, "queue.submit")

    # auto without queue.local never falls back to the idle local runner: the admin's
    # later job takes it and completes while this one still waits for a remote worker.
    waiting = orch.request("POST", "/api/queue/submit", {"config_name": "quick"}, token=token)
    admins = orch.submit(config_name="quick", target="local")
    orch.wait_job(admins["job_id"], {"completed"})
    job = orch.job(waiting["job_id"])
    assert (job["status"], job["target"], job["worker_id"]) == ("pending", "worker", None)
    orch.request("POST", f"/api/queue/{waiting['job_id']}/cancel", {}, token=token)

    _, worker_id = start_agent(orch, agents, tmp_path, "gpu-1")
    bodies = [
        ({"config_name": "quick", "target": "worker", "command": touch}, "queue.command"),
        ({"config_name": "quick", "target": "auto", "command": touch}, "queue.command"),
        ({"config": {"tunefleet_command": touch}, "target": "worker"}, "queue.command"),
        (
            {"config_name": "quick", "target": "worker", "env": {"BASH_ENV": str(marker)}},
            "queue.command",
        ),
        ({"config_name": "quick", "target": "local"}, "queue.local"),
        ({"config_name": "quick", "target": "local", "command": touch}, "queue.command"),
    ]
    before = orch.request("GET", "/api/audit?kind=auth.failed&limit=500")["total"]
    for body, permission in bodies:
        detail = refused(orch, token, body)["detail"]
        assert detail.startswith(f"Permission denied: {permission} (needed for "), body
    audit = orch.request("GET", "/api/audit?kind=auth.failed&limit=500")
    assert audit["total"] - before == len(bodies)
    reasons = [e["detail"]["reason"] for e in audit["events"][: len(bodies)]]
    assert all(" lacks queue." in reason for reason in reasons)
    assert all(e["target"] == "POST /api/queue/submit" for e in audit["events"][: len(bodies)])

    # The worker is idle and took nothing; what the token may do still works there.
    ok = orch.request("POST", "/api/queue/submit", {"config_name": "quick"}, token=token)
    assert orch.wait_job(ok["job_id"], {"completed"})["worker_id"] == worker_id
    assert not marker.exists()


def test_with_command_and_local_it_runs_but_the_trainer_cannot_read_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root, the local runner runs a non-admin's trainers as nobody, in a work directory
    outside the data directory (closed to others), with the orchestrator's secrets
    scrubbed from their environment. The controls, the admin's job in the same runner and
    the same job with --local-runner-unisolated, read the data directory: the check can
    fail."""
    if os.geteuid() != 0:
        pytest.skip("isolating local trainers needs an orchestrator running as root")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this machine has no user nobody to run trainers as")
    # Under /var/tmp, not pytest's tmp_path (mode 0700 above it would hide the data
    # directory from nobody whatever tunefleet does).
    base = Path(tempfile.mkdtemp(prefix="tunefleet-isolation-", dir="/var/tmp"))
    try:
        base.chmod(0o755)
        data, work = base / "data", base / "work"
        monkeypatch.setenv("TUNEFLEET_ADMIN_TOKEN", ADMIN_TOKEN)  # a secret in its env
        script = (
            "id -un; echo token=${TUNEFLEET_ADMIN_TOKEN:-unset}; "
            f"if ls {data} >/dev/null 2>&1 || cat {data}/tunefleet.db >/dev/null 2>&1; "
            "then echo data=READ; else echo data=DENIED; fi; touch ran-here"
        )
        isolated, admins = run_local_jobs(tmp_path, data, work, script, [])
        assert isolated["lines"][:3] == ["nobody", "token=unset", "data=DENIED"]
        assert f"isolated as nobody in {work} for others" in isolated["log"]
        assert (work / "jobs" / isolated["job_id"] / "attempt-1" / "ran-here").exists()
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert admins["lines"][:3] == ["root", "token=unset", "data=READ"]
        own_folder = work / "own-user" / "jobs" / admins["job_id"] / "attempt-1"
        assert (own_folder / "ran-here").exists()
        control, _ = run_local_jobs(tmp_path, data, work, script, ["--local-runner-unisolated"])
        assert control["lines"][:3] == ["root", "token=unset", "data=READ"]
        assert "local runner: UNISOLATED (--local-runner-unisolated)" in control["log"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_local_jobs(
    tmp_path: Path, data: Path, work: Path, script: str, extra: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start an orchestrator whose local runner runs /bin/sh, submit the script with a
    researcher's token holding queue.command and queue.local, then with the admin's;
    their output lines."""
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    args = [
        "--local-train-command", "/bin/sh -c true",
        "--local-allowed-commands", "/bin/sh -c **",
        "--local-work-dir", str(work),
        *extra,
    ]  # fmt: skip
    orch = Orchestrator(data, configs, local_runner=True, extra_args=args).start()
    try:
        token = researcher_token(orch, "queue.submit", "queue.command", "queue.local")
        body = {"config": {"lr": 1}, "target": "local", "command": ["/bin/sh", "-c", script]}
        ran = []
        for submitter in (token, ADMIN_TOKEN):
            job_id = orch.request("POST", "/api/queue/submit", body, token=submitter)["job_id"]
            ended = orch.wait_job(job_id, {"completed", "failed"})
            assert ended["status"] == "completed", (ended, orch.log())
            logs = orch.request("GET", f"/api/queue/{job_id}/logs")
            lines = [line["line"] for line in logs["lines"]]
            assert orch.log_path is not None  # the banner, which the log's tail has passed
            ran.append({"job_id": job_id, "lines": lines, "log": orch.log_path.read_text()})
        return ran[0], ran[1]
    finally:
        orch.stop()


def test_an_agent_runs_only_its_allowed_commands(
    orchestrator: Orchestrator, agents: list[Agent], tmp_path: Path
) -> None:
    """The agent reports its allowed commands, so a job it would refuse is not sent to
    it (it waits, saying why); and a job the scheduler cannot judge (the worker's own
    default command, which its operator left out) fails at the agent with the reason,
    without running."""
    orch = orchestrator
    marker = tmp_path / "marker"
    touch = f"sh -c 'touch {marker}'"
    created = orch.create_worker("picky")
    agent = Agent(
        orch.url,
        created["token"],
        tmp_path / "work-picky",
        "picky",
        persistent=True,
        extra_args=[
            "--train-command",
            touch,
            "--allowed-commands",
            "python -m tunefleet.examples.tiny_trainer",
        ],
    ).start()
    agents.append(agent)
    orch.wait_worker(created["worker_id"], "idle")

    chosen = orch.submit(config={"lr": 1}, target="worker", command=["sh", "-c", f"touch {marker}"])
    waiting = orch.job(chosen["job_id"])
    assert waiting["status"] == "pending"
    assert 'would refuse the job: command "sh -c ' in waiting["wait_reason"]
    orch.request("POST", f"/api/queue/{chosen['job_id']}/cancel", {})

    default = orch.submit(config={"lr": 1}, target="worker")
    failed = orch.wait_job(default["job_id"], {"failed", "completed"})
    assert failed["status"] == "failed"
    assert failed["error"].startswith('refused by this worker: command "sh -c ')
    assert (
        "is not among the allowed commands ('python -m tunefleet.examples.tiny_trainer')"
        in (failed["error"])
    )
    assert not marker.exists()

    allowed = orch.submit(config_name="quick", target="worker")
    assert orch.wait_job(allowed["job_id"], {"completed", "failed"})["status"] == "completed"


def test_an_agents_trainer_holds_none_of_the_agents_credentials(
    orchestrator: Orchestrator,
    agents: list[Agent],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 23: a real agent given its token both ways (SIMPLETUNER_WORKER_TOKEN and
    --worker-token), with an operator's API token about; the trainer's environment has
    neither token under any name, and does have its attempt's upload token."""
    orch = orchestrator
    dump = tmp_path / "trainer-env.json"
    monkeypatch.setenv("TUNEFLEET_TOKEN", ADMIN_TOKEN)
    created = orch.create_worker("env-check")
    show = f"import json, os; open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))"
    agent = Agent(
        orch.url,
        created["token"],
        tmp_path / "work-env",
        "env-check",
        persistent=True,
        extra_args=[
            "--worker-token",
            created["token"],
            "--allowed-commands",
            "python -c **",
        ],
    ).start()
    agents.append(agent)
    orch.wait_worker(created["worker_id"], "idle")
    job = orch.submit(config={"lr": 1}, target="worker", command=["python", "-c", show])
    assert orch.wait_job(job["job_id"], {"completed", "failed"})["status"] == "completed"
    seen = json.loads(dump.read_text())
    assert not [name for name, value in seen.items() if created["token"] in value]
    assert not [name for name, value in seen.items() if ADMIN_TOKEN in value]
    assert seen["TUNEFLEET_UPLOAD_TOKEN"].startswith("ut_")
