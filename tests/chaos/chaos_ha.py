"""Several orchestrator processes on one PostgreSQL database, seen by the chaos fleet and
the fault injector as the one `Orchestrator` they expect: requests go to whichever is
active (as a client that fails over would send them), agents get every URL, and the
pair restarts a process that exited, as a supervisor would (exit code 3 = stepped down).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from tests.e2e.harness import ApiError, Orchestrator, wait_until


class OrchestratorGroup:
    def __init__(
        self,
        root: Path,
        configs_dir: Path,
        database_url: str,
        *,
        count: int = 2,
        heartbeat_timeout_s: float = 4.0,
        lease_s: float = 2.0,
    ) -> None:
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.lease_s = lease_s
        self.nodes: list[Orchestrator] = []
        for index in range(count):
            node = Orchestrator(
                root / f"data-{index}",
                configs_dir,
                heartbeat_timeout_s=heartbeat_timeout_s,
                extra_args=["--database-url", database_url, "--leader-lease", str(lease_s)],
            )
            node.extra_args += ["--advertise-url", node.url]
            self.nodes.append(node)
        self.takeovers_s: list[float] = []  # kill of the active one → another one active
        self.exits: list[str] = []  # processes that ended by themselves, and how

    # --- what Orchestrator offers ----------------------------------------------------------

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes)

    @property
    def port(self) -> int:
        return self.active_node().port

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.active_node().process

    def start(self) -> OrchestratorGroup:
        """Start every process that is not running; the first start waits for an active one."""
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                node.start(wait_ready=False)
        wait_until(self._any_ready, 30, 0.1, "an active orchestrator")
        return self

    def kill(self) -> None:
        """kill -9 of the active process (RESTART_ORCHESTRATOR's fault on a group)."""
        self.kill_active()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        last: Exception | None = None
        for node in self._by_role():
            try:
                return node.request(method, path, body, **kwargs)
            except ApiError as error:
                if error.status != 503:
                    raise
                last = error
            except OSError as error:
                last = error
        assert last is not None
        raise last

    def create_worker(self, name: str, worker_type: str = "persistent") -> dict[str, Any]:
        body = {"name": name, "worker_type": worker_type, "labels": {}}
        return self.request("POST", "/api/admin/workers", body)  # type: ignore[no-any-return]

    def worker(self, worker_id: str) -> dict[str, Any]:
        return self.request("GET", f"/api/admin/workers/{worker_id}")  # type: ignore[no-any-return]

    def submit(self, **body: Any) -> dict[str, Any]:
        return self.request("POST", "/api/queue/submit", body)  # type: ignore[no-any-return]

    def job(self, job_id: str) -> dict[str, Any]:
        return self.request("GET", f"/api/queue/{job_id}")  # type: ignore[no-any-return]

    def log(self) -> str:
        return "\n".join(node.log() for node in self.nodes)

    # --- high availability -------------------------------------------------------------------

    def role(self, node: Orchestrator) -> str | None:
        if node.process is None or node.process.poll() is not None:
            return None
        try:
            return str(node.request("GET", "/healthz", token=None).get("role"))
        except (OSError, ApiError, ValueError):
            return None

    def active_node(self) -> Orchestrator:
        for node in self.nodes:
            if self.role(node) == "active":
                return node
        return self.nodes[0]

    def kill_active(self) -> dict[str, Any]:
        """kill -9 of the active process; waits (bounded) for another one to be active."""
        victim = self.active_node()
        pid = victim.process.pid if victim.process is not None else None
        try:
            stats = victim.request("GET", "/api/queue/stats")
            running = int(stats["dispatched"]) + int(stats["running"])
        except (OSError, ApiError, ValueError, KeyError):
            running = None
        victim.kill()
        killed = time.monotonic()
        others = [node for node in self.nodes if node is not victim]
        try:
            wait_until(
                lambda: any(self.role(node) == "active" for node in others),
                30,
                0.05,
                "a standby to take over",
            )
        except AssertionError:
            return {"pid": pid, "victim": victim.url, "jobs_running": running, "takeover_s": None}
        took = round(time.monotonic() - killed, 2)
        self.takeovers_s.append(took)
        return {"pid": pid, "victim": victim.url, "jobs_running": running, "takeover_s": took}

    def restart_dead(self) -> None:
        """Start again, as a standby, every process that is not running."""
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                node.start(wait_ready=False)

    def supervise(self, killed: set[str]) -> None:
        """A process that exited by itself (not killed by a fault) is noted and restarted."""
        for node in self.nodes:
            if node.process is None or node.url in killed:
                continue
            code = node.process.poll()
            if code is not None:
                self.exits.append(f"{node.url} exited with code {code}: {node.log()[-800:]}")
                node.start(wait_ready=False)

    def _any_ready(self) -> bool:
        for node in self.nodes:
            try:
                if node.request("GET", "/readyz", token=None)["status"] == "ready":
                    return True
            except (OSError, ApiError, ValueError):
                continue
        return False

    def _by_role(self) -> list[Orchestrator]:
        active = [node for node in self.nodes if self.role(node) == "active"]
        return active + [node for node in self.nodes if node not in active]
