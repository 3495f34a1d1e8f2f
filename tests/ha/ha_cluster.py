"""Two (or more) real orchestrator processes on one PostgreSQL schema, for the HA tests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.harness import ApiError, Orchestrator, wait_until


@dataclass
class Cluster:
    root: Path
    database_url: str
    lease_s: float = 1.0
    heartbeat_timeout_s: float = 6.0
    nodes: list[Orchestrator] = field(default_factory=list)

    def add(self, name: str) -> Orchestrator:
        node = Orchestrator(
            self.root / name,
            self.root / "configs",
            heartbeat_timeout_s=self.heartbeat_timeout_s,
            extra_args=[
                "--database-url",
                self.database_url,
                "--leader-lease",
                str(self.lease_s),
            ],
        )
        node.extra_args += ["--advertise-url", node.url]
        self.nodes.append(node)
        return node

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()

    @property
    def urls(self) -> str:
        return ",".join(node.url for node in self.nodes)


def health(node: Orchestrator) -> dict[str, Any]:
    return node.request("GET", "/healthz", token=None)  # type: ignore[no-any-return]


def role(node: Orchestrator) -> str | None:
    try:
        return str(health(node)["role"])
    except (OSError, ApiError, KeyError):
        return None


def refusal(node: Orchestrator, method: str, path: str, body: Any = None) -> dict[str, Any]:
    """The 503 a standby answers; fails the test if it answers anything else."""
    try:
        answer = node.request(method, path, body)
    except ApiError as error:
        assert error.status == 503, (error.status, error.body)
        return error.body
    raise AssertionError(f"{node.url} answered {method} {path}: {json.dumps(answer)[:200]}")


def wait_role(node: Orchestrator, wanted: str, timeout_s: float) -> float:
    """Seconds until `node` reports `wanted` (the role)."""
    import time

    started = time.monotonic()
    wait_until(lambda: role(node) == wanted, timeout_s, 0.05, f"{node.url} to be {wanted}")
    return time.monotonic() - started
