"""The orchestrator in-process: ``build_app(ServerOptions, FakeClock)`` behind pytest-aiohttp's
test client, a known admin token, a configs directory with small configurations, and helpers
that put the fleet into the states the endpoint tests start from."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.server.protocol import WorkerClient, eventually
from tunefleet.actors.clock import FakeClock
from tunefleet.actors.fleet import Fleet
from tunefleet.http import keys
from tunefleet.http.app import ServerOptions, build_app
from tunefleet.storage.store import Store

ADMIN_TOKEN = "tf_server-tests-admin-token-0123456789abcdefghijklmno"
ClientMaker = Callable[[web.Application], Awaitable[TestClient]]


def write_configs(configs_dir: Path) -> None:
    """Both layouts: SimpleTuner's ``<name>/config.json`` (with its data-loader file beside
    it) and a plain ``<name>.json``; ``multi-gpu`` asks for 4 processes."""
    folder = configs_dir / "sdxl-lora"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps({"model_type": "lora", "learning_rate": 1e-4, "--num_processes": 1})
    )
    (folder / "multidatabackend.json").write_text(json.dumps([{"id": "pics", "type": "local"}]))
    (configs_dir / "tiny.json").write_text(json.dumps({"model_type": "full", "max_steps": 10}))
    (configs_dir / "multi-gpu.json").write_text(
        json.dumps({"model_type": "full", "num_processes": 4})
    )


@dataclass
class Server:
    """One running orchestrator and what a test needs to drive it."""

    client: TestClient
    app: web.Application
    clock: FakeClock
    data_dir: Path
    configs_dir: Path

    @property
    def fleet(self) -> Fleet:
        return self.app[keys.FLEET]

    @property
    def store(self) -> Store:
        return self.app[keys.STORE]

    admin_token: str = ADMIN_TOKEN

    @property
    def admin(self) -> dict[str, str]:
        return bearer(ADMIN_TOKEN)

    @staticmethod
    def bearer(token: str) -> dict[str, str]:
        return bearer(token)

    def set_ping_interval(self, seconds: float) -> None:
        ctx = self.fleet.ctx
        ctx.settings = dataclasses.replace(ctx.settings, ping_interval_s=seconds)

    # --- HTTP shorthands (admin token unless headers are given) ---------------------------

    async def get(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> Any:
        return await self.client.get(path, headers=self.admin if headers is None else headers, **kw)

    async def post(
        self, path: str, body: Any = None, headers: dict[str, str] | None = None, **kw: Any
    ) -> Any:
        hdrs = self.admin if headers is None else headers
        if body is None:
            return await self.client.post(path, headers=hdrs, **kw)
        return await self.client.post(path, json=body, headers=hdrs, **kw)

    async def delete(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> Any:
        return await self.client.delete(
            path, headers=self.admin if headers is None else headers, **kw
        )

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        """Call with the admin token and insist on a 200; returns the JSON."""
        if body is not None:
            kw["json"] = body
        resp = await self.client.request(method, path, headers=self.admin, **kw)
        data = await resp.json()
        if resp.status != 200:
            raise AssertionError(f"{method} {path} → {resp.status} {data}")
        return data

    # --- fleet setup ----------------------------------------------------------------------

    async def create_worker(
        self,
        name: str = "gpu-worker-1",
        labels: dict[str, str] | None = None,
        worker_type: str = "persistent",
    ) -> WorkerClient:
        body = {"name": name, "worker_type": worker_type, "labels": labels or {}}
        data = await self.ok("POST", "/api/admin/workers", body)
        return WorkerClient(self.client, data["token"], data["worker_id"])

    async def connected_worker(
        self, name: str = "gpu-worker-1", labels: dict[str, str] | None = None, **register: Any
    ) -> WorkerClient:
        worker = await self.create_worker(name, labels)
        await worker.connect(name, **register)
        return worker

    async def api_token(self, *permissions: str, name: str = "scoped") -> str:
        data = await self.ok(
            "POST", "/api/admin/tokens", {"name": name, "permissions": list(permissions)}
        )
        return str(data["token"])

    async def submit(self, **body: Any) -> dict[str, Any]:
        if "config_name" not in body:
            body.setdefault("config", {"model_type": "lora"})
        return await self.ok("POST", "/api/queue/submit", body)

    async def job(self, job_id: str) -> dict[str, Any]:
        return await self.ok("GET", f"/api/queue/{job_id}")

    async def worker_view(self, worker_id: str) -> dict[str, Any]:
        return await self.ok("GET", f"/api/admin/workers/{worker_id}")

    async def running_job(self, worker: WorkerClient, **submit: Any) -> str:
        """Submit a job, let ``worker`` take it and acknowledge it: the job is running."""
        submit.setdefault("target", "worker")
        job_id = (await self.submit(**submit))["job_id"]
        event = await worker.take_job()
        if event["job_id"] != job_id:
            raise AssertionError(f"worker got {event['job_id']}, expected {job_id}")
        return str(job_id)

    async def wait_job(self, job_id: str, status: str) -> dict[str, Any]:
        """Poll until the job has ``status`` (actors finish their work asynchronously)."""

        async def reached() -> dict[str, Any] | None:
            job = await self.job(job_id)
            return job if job["status"] == status else None

        return await eventually(reached, f"job {job_id} to be {status}")

    async def wait_worker(self, worker_id: str, status: str) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            view = await self.worker_view(worker_id)
            return view if view["status"] == status else None

        return await eventually(reached, f"worker {worker_id} to be {status}")

    async def settle(self) -> None:
        """Let the actors process what is queued (no time passes)."""
        await self.clock.advance(0)

    async def audit(self, **query: Any) -> list[dict[str, Any]]:
        data = await self.ok("GET", "/api/audit", params={"limit": 500, **query})
        return list(data["events"])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def options_for(tmp_path: Path, **overrides: Any) -> ServerOptions:
    configs_dir = tmp_path / "configs"
    if not configs_dir.exists():
        write_configs(configs_dir)
    values: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "configs_dir": configs_dir,
        "local_runner": False,
        # Local jobs' folders in the test's own directory, not /var/tmp's default.
        "local_work_dir": tmp_path / "local-work",
        "admin_token": ADMIN_TOKEN,
        "log_format": "json",
    }
    values.update(overrides)
    return ServerOptions(**values)


ServerMaker = Callable[..., Awaitable[Server]]


@pytest.fixture
def make_server(aiohttp_client: ClientMaker, tmp_path: Path) -> ServerMaker:
    """Start an orchestrator with ServerOptions overrides (same data dir on every call)."""

    async def start(**overrides: Any) -> Server:
        clock = FakeClock()
        options = options_for(tmp_path, **overrides)
        app = build_app(options, clock)
        client = await aiohttp_client(app)
        return Server(client, app, clock, options.data_dir, options.configs_dir)

    return start


@pytest.fixture
async def server(make_server: ServerMaker) -> Server:
    return await make_server()
