"""Real orchestrator and agent processes on loopback, for end-to-end tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ADMIN_TOKEN = "tf_e2e-admin-token-for-tests-only-0123456789abcdef"
TUNEFLEET = [sys.executable, "-m", "tunefleet"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(
    check: Callable[[], Any], timeout_s: float = 30.0, interval_s: float = 0.1, what: str = ""
) -> Any:
    """Poll until ``check()`` is truthy; its value is returned. Bounded by ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what or check}: {last!r}")


class ApiError(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body


@dataclass
class Orchestrator:
    data_dir: Path
    configs_dir: Path
    port: int = field(default_factory=free_port)
    heartbeat_timeout_s: float = 3.0
    extra_args: list[str] = field(default_factory=list)
    # The process's working directory: relative --data-dir/--configs-dir are read from it.
    cwd: Path | None = None
    local_runner: bool = False
    # Put before the command: another user's orchestrator (setpriv --reuid ...).
    command_prefix: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    local_runner: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait_ready: bool = True) -> Orchestrator:
        """Start the process; wait until it is ready, or (a standby) until it answers."""
        data_dir = (self.cwd or Path.cwd()) / self.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = data_dir / f"server-{int(time.time() * 1000)}.log"
        args = [
            *self.command_prefix,
            *TUNEFLEET,
            "server",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--configs-dir",
            str(self.configs_dir),
            "--heartbeat-timeout",
            str(self.heartbeat_timeout_s),
            "--health-check-interval",
            "0.5",
            "--dispatch-ack-timeout",
            "10",
            "--admin-token",
            ADMIN_TOKEN,
            "--local-runner" if self.local_runner else "--no-local-runner",
            *self.extra_args,
        ]
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd)
        if wait_ready:
            wait_until(self._ready, timeout_s=30, what="the orchestrator to be ready")
        else:
            wait_until(self._answers, timeout_s=30, what="the orchestrator to answer")
        return self

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"orchestrator exited: {self.log()}")
        try:
            return bool(self.request("GET", "/healthz", token=None))
        except (OSError, ApiError):
            return False

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"orchestrator exited: {self.log()}")
        try:
            return self.request("GET", "/readyz", token=None)["status"] == "ready"
        except (OSError, ApiError):
            return False

    def kill(self) -> None:
        """kill -9: no goodbye, no flush beyond what was committed."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path else ""

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        token: str | None = ADMIN_TOKEN,
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as error:
            raise ApiError(error.code, json.loads(error.read() or b"{}")) from None

    # --- conveniences -----------------------------------------------------------------

    def create_worker(
        self, name: str, worker_type: str = "persistent", labels: dict[str, str] | None = None
    ) -> dict[str, Any]:
        body = {"name": name, "worker_type": worker_type, "labels": labels or {}}
        return self.request("POST", "/api/admin/workers", body)  # type: ignore[no-any-return]

    def worker(self, worker_id: str) -> dict[str, Any]:
        return self.request("GET", f"/api/admin/workers/{worker_id}")  # type: ignore[no-any-return]

    def submit(self, **body: Any) -> dict[str, Any]:
        return self.request("POST", "/api/queue/submit", body)  # type: ignore[no-any-return]

    def job(self, job_id: str) -> dict[str, Any]:
        return self.request("GET", f"/api/queue/{job_id}")  # type: ignore[no-any-return]

    def wait_job(self, job_id: str, states: set[str], timeout_s: float = 60.0) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["status"] in states else None

        return wait_until(reached, timeout_s, 0.2, f"job {job_id} to reach {states}")  # type: ignore[no-any-return]

    def wait_worker(self, worker_id: str, status: str, timeout_s: float = 30.0) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            worker = self.worker(worker_id)
            return (
                worker
                if worker["status"] == status
                and worker["connected"] == (status not in ("offline", "connecting"))
                else None
            )

        return wait_until(reached, timeout_s, 0.1, f"worker {worker_id} to be {status}")  # type: ignore[no-any-return]


@dataclass
class Agent:
    orchestrator_url: str
    token: str
    work_dir: Path
    name: str
    persistent: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None  # a relative work_dir is read from here
    extra_args: list[str] = field(default_factory=list)
    # Added to the environment, e.g. {"TUNEFLEET_FAKE_GPUS": "2"} for GPUs on a CPU machine.
    extra_env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    def start(self) -> Agent:
        """From environment variables, as the seed's quick start shows."""
        env = {
            **os.environ,
            "SIMPLETUNER_ORCHESTRATOR_URL": self.orchestrator_url,
            "SIMPLETUNER_WORKER_TOKEN": self.token,
            "SIMPLETUNER_WORKER_NAME": self.name,
            "SIMPLETUNER_HEARTBEAT_INTERVAL": "0.5",
            **self.extra_env,
        }
        if self.persistent:
            env["SIMPLETUNER_WORKER_PERSISTENT"] = "true"
        args = [*TUNEFLEET, "worker", "--work-dir", str(self.work_dir)]
        for key, value in self.labels.items():
            args += ["--labels", f"{key}={value}"]
        args += self.extra_args
        work_dir = (self.cwd or Path.cwd()) / self.work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = work_dir / f"agent-{self.name}.log"
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            args, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd
        )
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # The whole process group would take the trainer too; -9 of the agent alone
            # leaves its trainer orphaned, as a crashed machine's would be gone.
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        if self.process is None:
            raise AssertionError("agent was never started")
        return self.process.wait(timeout=timeout_s)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""


def write_tiny_config(configs_dir: Path, name: str, **overrides: Any) -> None:
    config: dict[str, Any] = {
        "tunefleet_command": ["python", "-m", "tunefleet.examples.tiny_trainer"],
        "max_train_steps": 10,
        "step_seconds": 0.02,
        "output_dir": "output",
        **overrides,
    }
    folder = configs_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
