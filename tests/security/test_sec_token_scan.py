"""Tokens never appear in clear anywhere the orchestrator or an agent writes: a realistic
session against real processes (json logs, -v), then a scan of the server log, the
agents' logs, audit.jsonl, the SQLite database (every table, and the raw bytes of the
database and its WAL), every other file in the data and work directories, and the body
of every error response, for every token the session issued or sent.

A token counts as leaked when it appears whole, without its prefix, or as any 16
characters of its random part: the redacted form (prefix and last four) is all that
may show."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    ADMIN_TOKEN,
    TUNEFLEET,
    Orchestrator,
    wait_until,
    write_tiny_config,
)
from tests.security.conftest import Reply, call

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
WINDOW = 16


@dataclass
class Session:
    orch: Orchestrator
    root: Path
    secrets: set[str] = field(default_factory=set)
    error_bodies: list[str] = field(default_factory=list)
    agents: list[subprocess.Popen[bytes]] = field(default_factory=list)
    agent_logs: list[Path] = field(default_factory=list)

    def send(
        self, method: str, path: str, headers: Mapping[str, str | bytes], body: Any = None
    ) -> Reply:
        reply = call(self.orch.url, method, path, headers=headers, body=body)
        if reply.status >= 400:
            self.error_bodies.append(reply.text)
        return reply

    def admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        reply = self.send(method, path, {"Authorization": f"Bearer {ADMIN_TOKEN}"}, body)
        assert reply.status == 200, (method, path, reply.status, reply.text)
        return reply.json()

    def issue_worker(self, name: str, worker_type: str = "persistent") -> tuple[str, str]:
        created = self.admin(
            "POST", "/api/admin/workers", {"name": name, "worker_type": worker_type}
        )
        self.secrets.add(created["token"])
        return created["worker_id"], created["token"]

    def rotate(self, worker_id: str) -> str:
        token = str(self.admin("POST", f"/api/admin/workers/{worker_id}/token")["token"])
        self.secrets.add(token)
        return token

    def issue_api_token(self, name: str, *permissions: str) -> dict[str, Any]:
        created = self.admin(
            "POST", "/api/admin/tokens", {"name": name, "permissions": list(permissions)}
        )
        self.secrets.add(created["token"])
        return dict(created)

    def start_agent(
        self, name: str, token: str, *, persistent: bool = True
    ) -> subprocess.Popen[bytes]:
        """`tunefleet worker` as an operator runs it: token from the environment, json logs, -v."""
        work_dir = self.root / f"work-{name}"
        work_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.root / f"agent-{name}-{len(self.agent_logs)}.log"
        env = {
            **os.environ,
            "SIMPLETUNER_ORCHESTRATOR_URL": self.orch.url,
            "SIMPLETUNER_WORKER_TOKEN": token,
            "SIMPLETUNER_WORKER_NAME": name,
            "SIMPLETUNER_HEARTBEAT_INTERVAL": "0.5",
        }
        args = [*TUNEFLEET, "worker", "--work-dir", str(work_dir), "--log-format", "json", "-v"]
        if persistent:
            args.append("--persistent")
        with log_path.open("wb") as log:
            process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.agents.append(process)
        self.agent_logs.append(log_path)
        return process

    def wait_worker(self, worker_id: str, status: str) -> None:
        wait_until(
            lambda: self.admin("GET", f"/api/admin/workers/{worker_id}")["status"] == status,
            timeout_s=30,
            what=f"worker {worker_id} to be {status}",
        )

    def wait_job(self, job_id: str, status: str) -> None:
        job = self.orch.wait_job(job_id, {status, "failed", "cancelled"}, timeout_s=60)
        assert job["status"] == status, job


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    configs = tmp_path / "configs"
    write_tiny_config(configs, "quick", max_train_steps=5, step_seconds=0.02)
    orch = Orchestrator(tmp_path / "data", configs, extra_args=["--log-format", "json", "-v"])
    orch.start()
    run = Session(orch, tmp_path, secrets={ADMIN_TOKEN})
    try:
        yield run
    finally:
        for process in run.agents:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)
        orch.stop()


def play(run: Session) -> None:
    """Workers, API tokens, rotation, revocation, agents, jobs and every kind of wrong
    token an operator or an attacker sends."""
    ci = run.issue_api_token("ci", "queue.submit")
    auditor = run.issue_api_token("auditor", "audit.read")
    run.admin("DELETE", f"/api/admin/tokens/{auditor['id']}")
    alpha_id, first_alpha = run.issue_worker("alpha")
    alpha = run.rotate(alpha_id)  # the first token is dead before any agent uses it
    beta_id, beta = run.issue_worker("beta", "ephemeral")

    run.start_agent("alpha", alpha)
    run.start_agent("beta", beta, persistent=False)
    run.wait_worker(alpha_id, "idle")
    run.wait_worker(beta_id, "idle")
    submit = {"Authorization": f"Bearer {ci['token']}"}
    for _ in range(2):
        reply = run.send(
            "POST", "/api/queue/submit", submit, {"config_name": "quick", "target": "worker"}
        )
        assert reply.status == 200, reply.text
        run.wait_job(reply.json()["job_id"], "completed")

    # Wrong tokens of every kind, in every place a client might put them.
    never_issued_worker = "wt_" + "Q" * 43
    never_issued_api = "tf_" + "Z" * 43
    run.secrets |= {never_issued_worker, never_issued_api}
    wrong: list[tuple[str, str, dict[str, str | bytes]]] = [
        ("POST", "/api/workers/heartbeat", {"X-Worker-Token": first_alpha}),
        ("POST", "/api/workers/heartbeat", {"X-Worker-Token": never_issued_worker}),
        ("POST", "/api/workers/register", {"X-Worker-Token": f"  {first_alpha}\t"}),
        ("GET", "/api/queue", {"Authorization": f"Bearer {auditor['token']}"}),
        ("GET", "/api/queue", {"Authorization": f"Bearer {never_issued_api}"}),
        ("GET", "/api/queue", {"Authorization": f"Bearer {alpha}"}),
        ("GET", "/api/queue", {"Authorization": alpha}),
        ("GET", "/api/queue", {"Authorization": f"Basic {ci['token']}"}),
        ("GET", "/api/admin/workers", {"Authorization": f"Bearer {ci['token']}"}),
        ("POST", "/api/workers/heartbeat", {"X-Worker-Token": ci["token"]}),
        ("GET", "/api/audit", {"X-Worker-Token": alpha, "Authorization": f"Bearer {ci['token']}"}),
        (
            "POST",
            "/api/workers/heartbeat",
            {"X-Worker-Token": beta, "Authorization": f"Bearer {alpha}"},
        ),
    ]
    for method, path, headers in wrong:
        body = {"worker_id": alpha_id} if method == "POST" else None
        assert run.send(method, path, headers, body).status in (400, 401, 403, 409), path

    # A token with a stray control character. aiohttp's HTTP parser refuses the request
    # before tunefleet sees it and echoes the offending header line to its sender in a
    # text/plain 400 (aiohttp's own answer, outside the application; so that body is
    # not among the scanned ones). The server's log of it is scanned.
    broken = {"Authorization": f"Bearer {ci['token']}\x01".encode()}
    reply = call(run.orch.url, "GET", "/api/queue", headers=broken)
    assert (reply.status, reply.headers.get_content_type()) == (400, "text/plain")

    # A token pasted where a job id or worker id goes.
    for path in (f"/api/queue/{ci['token']}", f"/api/admin/workers/{alpha}"):
        assert run.send("GET", path, {"Authorization": f"Bearer {ADMIN_TOKEN}"}).status == 404

    # An agent started with the rotated-away token, and one whose token is rotated
    # under it: both must stop with a message that does not repeat the token.
    stale = run.start_agent("stale", first_alpha)
    assert stale.wait(timeout=30) == 1
    run.rotate(alpha_id)
    assert run.agents[0].wait(timeout=30) == 1


def leak_patterns(secrets: set[str]) -> set[bytes]:
    patterns: set[bytes] = set()
    for secret in secrets:
        body = secret[3:] if secret[:3] in ("wt_", "tf_") else secret
        patterns.add(secret.encode())
        for start in range(0, max(1, len(body) - WINDOW + 1)):
            patterns.add(body[start : start + WINDOW].encode())
    return patterns


def find_leaks(blob: bytes, patterns: set[bytes]) -> list[str]:
    return sorted({p.decode() for p in patterns if p in blob})


def database_text(db_path: Path) -> bytes:
    """Every row of every table, as text."""
    out: list[str] = []
    with sqlite3.connect(db_path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                out.append(f"{table}: {row!r}")
    assert any(line.startswith("worker_token") or line.startswith("api_token") for line in out)
    return "\n".join(out).encode()


def test_no_token_in_logs_audit_database_files_or_error_bodies(session: Session) -> None:
    play(session)
    for process in session.agents:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=20)
    session.orch.stop()
    patterns = leak_patterns(session.secrets)
    data_dir = session.orch.data_dir
    assert session.orch.log_path is not None

    places: dict[str, bytes] = {
        "server log": session.orch.log_path.read_bytes(),
        "audit.jsonl": (data_dir / "audit.jsonl").read_bytes(),
        "database rows": database_text(data_dir / "tunefleet.db"),
        "error bodies": "\n".join(session.error_bodies).encode(),
    }
    for log in session.agent_logs:
        places[log.name] = log.read_bytes()
    for path in sorted(session.root.rglob("*")):
        if path.is_file() and path.name != "key.pem":
            places.setdefault(str(path.relative_to(session.root)), path.read_bytes())

    # The scan must be looking at real material, or it proves nothing.
    assert b'"auth' in places["server log"] and b"debug" in places["server log"]
    # Refused permissions one by one, refused credentials the first of each kind one by
    # one and the rest in their window's summary (written at shutdown).
    assert places["audit.jsonl"].count(b'"auth.failed"') >= 4
    assert b'"auth.failed_window"' in places["audit.jsonl"]
    assert len(session.error_bodies) >= 14
    assert any(b"Invalid token" in places[log.name] for log in session.agent_logs)
    assert any(p.endswith("tunefleet.db") for p in places)

    leaks = {name: found for name, blob in places.items() if (found := find_leaks(blob, patterns))}
    assert not leaks, {name: found[:3] for name, found in leaks.items()}
