"""The security matrix for what a submission asks beyond ``queue.submit``: choosing the
program (``command``, an inline config's ``tunefleet_command``, env names that change
how programs load) needs ``queue.command``; running on the orchestrator's own machine
(``target: local``) needs ``queue.local``, and ``auto`` without it never falls back to
local. Each refusal is a 403 naming the permission, one audit record, nothing queued.

In-process (tests/server's ``server`` fixture), with the local runner on. Every job asks
for a label nothing has, so an accepted one waits and nothing runs behind the test."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.security.test_sec_matrix import assert_no_secret, audit_since, last_audit_id

NOWHERE = {"pool": "nowhere"}
SUBMIT = "queue.submit"
COMMAND = "queue.command"
LOCAL = "queue.local"

# (case, body, the permission beyond queue.submit it needs, or None)
CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("named config", {"config_name": "tiny", "target": "worker"}, None),
    ("named config with the operator's command", {"config_name": "ops-cmd"}, None),
    ("harmless env", {"config_name": "tiny", "env": {"WANDB_PROJECT": "x"}}, None),
    ("command", {"config_name": "tiny", "command": ["sh", "-c", "id"]}, COMMAND),
    ("command as a string", {"config_name": "tiny", "command": "sh -c id"}, COMMAND),
    (
        "inline tunefleet_command",
        {"config": {"tunefleet_command": ["sh", "-c", "id"], "lr": 1}},
        COMMAND,
    ),
    ("LD_PRELOAD", {"config_name": "tiny", "env": {"LD_PRELOAD": "/tmp/x.so"}}, COMMAND),
    ("PYTHONPATH", {"config_name": "tiny", "env": {"PYTHONPATH": "/tmp"}}, COMMAND),
    ("BASH_ENV", {"config_name": "tiny", "env": {"BASH_ENV": "/tmp/rc"}}, COMMAND),
    ("PATH", {"config_name": "tiny", "env": {"PATH": "/tmp"}}, COMMAND),
    ("target local", {"config_name": "tiny", "target": "local"}, LOCAL),
]

TOKENS = {
    "submit only": [SUBMIT],
    "submit + command": [SUBMIT, COMMAND],
    "submit + local": [SUBMIT, LOCAL],
    "all three": [SUBMIT, COMMAND, LOCAL],
}


@pytest.mark.parametrize("holder", list(TOKENS))
async def test_each_submission_needs_exactly_its_permission(make_server: Any, holder: str) -> None:
    server = await make_server(local_runner=True, local_runner_unisolated=True)
    (server.configs_dir / "ops-cmd.json").write_text(
        json.dumps({"tunefleet_command": ["python", "-m", "x"], "lr": 1})
    )
    created = await server.ok(
        "POST", "/api/admin/tokens", {"name": "probe", "permissions": TOKENS[holder]}
    )
    headers = server.bearer(created["token"])
    for case, body, needed in CASES:
        mark = await last_audit_id(server)
        resp = await server.client.post(
            "/api/queue/submit", json={**body, "worker_labels": NOWHERE}, headers=headers
        )
        data = await resp.json()
        if needed is None or needed in TOKENS[holder]:
            assert resp.status == 200, (holder, case, data)
            continue
        assert resp.status == 403, (holder, case, data)
        assert data["detail"].startswith(f"Permission denied: {needed} (needed for "), case
        (record,) = await audit_since(server, mark)
        assert (record["kind"], record["outcome"]) == ("auth.failed", "denied")
        assert record["target"] == "POST /api/queue/submit"
        assert record["detail"]["reason"].startswith(f"token {created['id']} lacks {needed}")
        assert_no_secret(created["token"], within=record)
    jobs = (await server.ok("GET", "/api/queue?limit=500"))["jobs"]
    allowed = [c for c in CASES if c[2] is None or c[2] in TOKENS[holder]]
    assert len(jobs) == len(allowed)  # a refused submission queued nothing


async def test_auto_without_queue_local_waits_for_a_worker(make_server: Any) -> None:
    """auto's local fallback is running on the orchestrator: without queue.local the job
    is queued for remote workers only; with it (the admin token) it stays auto."""
    server = await make_server(local_runner=True, local_runner_unisolated=True)
    token = (await server.ok("POST", "/api/admin/tokens", {"name": "ci", "permissions": [SUBMIT]}))[
        "token"
    ]
    resp = await server.client.post(
        "/api/queue/submit", json={"config_name": "tiny"}, headers=server.bearer(token)
    )
    assert resp.status == 200
    job = await server.job((await resp.json())["job_id"])
    assert (job["status"], job["target"], job["worker_id"]) == ("pending", "worker", None)
    admin_job = await server.submit(config_name="tiny", worker_labels=NOWHERE)
    assert (await server.job(admin_job["job_id"]))["target"] == "auto"


async def test_whoami_names_the_token_and_its_permissions(server: Any) -> None:
    created = await server.ok(
        "POST", "/api/admin/tokens", {"name": "ci", "permissions": [LOCAL, SUBMIT]}
    )
    resp = await server.client.get("/api/auth/whoami", headers=server.bearer(created["token"]))
    mine = await resp.json()
    assert mine == {
        "kind": "api",
        "id": created["id"],
        "name": "ci",
        "permissions": [SUBMIT, LOCAL],
        "user": "admin",
        "role": "admin",
        "teams": ["default"],
        "default_team": "default",
    }
    admin = await server.ok("GET", "/api/auth/whoami")
    assert admin["name"] == "admin" and COMMAND in admin["permissions"]
    resp = await server.client.get("/api/auth/whoami")
    assert resp.status == 401
