"""Shared by tests/security and tests/fuzz: a real orchestrator process with two registered
workers and a pending job (``LiveFleet``), a plain HTTP client over ``http.client`` that
sends exactly the bytes it is given, and the in-process server fixtures of tests/server.

The live fleet's workers never open a stream, and the job asks for a label no worker has,
so nothing is dispatched behind a test's back; the heartbeat timeout is long, so the
workers stay registered for the whole module.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import ADMIN_TOKEN, Orchestrator
from tests.server.conftest import make_server, server  # noqa: F401 - fixtures for this folder

NOWHERE_LABELS = {"pool": "nowhere"}


def fuzz_examples(default: int) -> int:
    """Examples per property: ``default`` in make test; the environment variable
    ``fuzz_long`` (or ``FUZZ_LONG``) raises it: a number is the count itself, anything
    else means ten times the default."""
    value = (os.environ.get("FUZZ_LONG") or os.environ.get("fuzz_long") or "").strip()  # noqa: SIM112
    if not value:
        return default
    return int(value) if value.isdigit() and int(value) > 1 else default * 10


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def call(
    base_url: str,
    method: str,
    path: str,
    *,
    headers: Mapping[str, str | bytes] | None = None,
    body: bytes | dict[str, Any] | None = None,
    timeout_s: float = 10.0,
    context: ssl.SSLContext | None = None,
    read_body: bool = True,
) -> Reply:
    """One request on a fresh connection. ``read_body=False`` returns a 200 after its
    headers (for event streams, which never end)."""
    parts = urllib.parse.urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    payload = json.dumps(body).encode() if isinstance(body, dict) else body
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        if payload is not None:
            conn.putheader("Content-Length", str(len(payload)))
        conn.endheaders(payload)
        response = conn.getresponse()
        data = response.read() if read_body or response.status != 200 else b""
        return Reply(response.status, response.headers, data)
    finally:
        conn.close()


@dataclass(frozen=True, slots=True)
class WorkerCreds:
    worker_id: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Worker-Token": self.token}


@dataclass
class LiveFleet:
    """A real orchestrator with an owner and another worker, both registered, and a job
    that stays pending."""

    orch: Orchestrator
    owner: WorkerCreds
    other: WorkerCreds
    pending_job_id: str

    @property
    def url(self) -> str:
        return self.orch.url

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    def call(self, method: str, path: str, **kwargs: Any) -> Reply:
        return call(self.url, method, path, **kwargs)

    def ok(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        reply = self.call(method, path, headers=self.admin, body=body)
        if reply.status != 200:
            raise AssertionError(f"{method} {path} → {reply.status} {reply.text}")
        return reply.json()

    def new_worker(self, name: str, register: bool = True) -> WorkerCreds:
        created = self.ok("POST", "/api/admin/workers", {"name": name})
        creds = WorkerCreds(created["worker_id"], created["token"])
        if register:
            reply = self.call(
                "POST", "/api/workers/register", headers=creds.headers, body={"name": name}
            )
            if reply.status != 200:
                raise AssertionError(f"register {name} → {reply.status} {reply.text}")
        return creds


def start_live_fleet(root: Path, extra_args: list[str] | None = None) -> LiveFleet:
    configs = root / "configs"
    configs.mkdir(parents=True, exist_ok=True)
    (configs / "tiny.json").write_text(json.dumps({"model_type": "lora"}))
    orch = Orchestrator(root / "data", configs, heartbeat_timeout_s=600.0)
    orch.extra_args = list(extra_args or [])
    orch.start()
    fleet = LiveFleet(orch, WorkerCreds("", ""), WorkerCreds("", ""), "")
    try:
        fleet.owner = fleet.new_worker("owner")
        fleet.other = fleet.new_worker("other")
        job = fleet.ok(
            "POST",
            "/api/queue/submit",
            {"config_name": "tiny", "target": "worker", "worker_labels": NOWHERE_LABELS},
        )
        fleet.pending_job_id = job["job_id"]
    except BaseException:
        orch.stop()
        raise
    return fleet


def running_fleet(
    factory: pytest.TempPathFactory, extra_args: list[str] | None = None
) -> Iterator[LiveFleet]:
    """The body of a module-scoped fixture: start, yield, stop."""
    fleet = start_live_fleet(factory.mktemp("live"), extra_args)
    try:
        yield fleet
    finally:
        fleet.orch.stop()


@pytest.fixture(scope="module")
def live_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveFleet]:
    yield from running_fleet(tmp_path_factory)
