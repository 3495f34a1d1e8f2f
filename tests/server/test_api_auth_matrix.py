"""The authentication matrix, over every route in the route table: no token, a wrong token,
a worker token where an API token is needed and the reverse, an API token without the
route's permission, a revoked token, another worker's token where a worker or its job is
named. Every refusal is the right status, changes nothing, and lands in the audit log."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from tests.server.protocol import WorkerClient
from tunefleet.http.auth import (
    ALL_PERMISSIONS,
    API_TOKEN_AS_WORKER,
    API_UNAUTHORIZED,
    WORKER_TOKEN_AS_API,
    WORKER_UNAUTHORIZED,
)
from tunefleet.http.openapi import RouteSpec
from tunefleet.http.route_table import routes

SPECS = routes.specs
WRONG_WORKER_TOKEN = "wt_" + "x" * 43
WRONG_API_TOKEN = "tf_" + "y" * 43
ADMIN_PASSWORD = "the matrix's passphrase"
UPLOAD_UNKNOWN = "Invalid upload token"
UPLOAD_MISSING = "Missing X-Upload-Token: send the upload_token of the job_submit"
# Routes where the request names a worker (query or body), and where it names a job.
NAMES_WORKER = {"/api/workers/stream", "/api/workers/queue", "/api/workers/heartbeat"}
NAMES_WORKER |= {"/api/workers/disconnect"}
NAMES_JOB = {"/api/workers/job/{job_id}/status", "/api/workers/job/{job_id}/logs"}


@dataclass
class Fixture:
    server: Any
    owner: WorkerClient
    stranger: WorkerClient
    job_id: str
    token_id: str

    def path(self, spec: RouteSpec, worker_id: str | None = None) -> str:
        path = (
            spec.path.replace("{worker_id}", self.owner.worker_id or "")
            .replace("{job_id}", self.job_id)
            .replace("{token_id}", self.token_id)
            .replace("{rule_id}", "1")
            .replace("{webhook_id}", "1")
            .replace("{delivery_id}", "d_none")
            .replace("{bucket}", "outputs")
            .replace("{key:.+}", "model.bin")
            .replace("{name}", "default" if "/teams/" in spec.path else "admin")
            .replace("{user}", "admin")
        )
        if spec.path in ("/api/workers/stream", "/api/workers/queue"):
            path += f"?worker_id={worker_id or self.owner.worker_id}"
        return path

    def body(self, spec: RouteSpec, worker_id: str | None = None) -> dict[str, Any] | None:
        if spec.path == "/api/auth/login":  # public: a person's password is the credential
            return {"username": "admin", "password": ADMIN_PASSWORD}
        if spec.method == "GET":
            return None
        return {
            "name": "gpu-worker-1",
            "worker_id": worker_id or self.owner.worker_id,
            "status": "running",
            "lines": [],
            "config_name": "tiny",
            "permissions": ["queue.submit"],
        }

    async def call(
        self, spec: RouteSpec, headers: dict[str, str], worker_id: str | None = None
    ) -> tuple[int, dict[str, Any] | None, Any]:
        resp = await self.server.client.request(
            spec.method,
            self.path(spec, worker_id),
            json=self.body(spec, worker_id),
            headers=headers,
        )
        status = resp.status
        body = None
        if status >= 400:
            body = json.loads(await resp.text())
        resp.close()  # streams stay open otherwise
        return status, body, resp.headers


@pytest.fixture
async def fx(server: Any) -> Fixture:
    owner = await server.connected_worker("owner")
    job_id = await server.running_job(owner)
    stranger = await server.create_worker("stranger")
    await stranger.register("stranger")
    await server.ok("POST", "/api/admin/users/admin/password", {"password": ADMIN_PASSWORD})
    tokens = await server.ok("GET", "/api/admin/tokens")
    return Fixture(server, owner, stranger, job_id, tokens["tokens"][0]["id"])


async def state_of(server: Any, *new_tokens: str) -> str:
    """Workers, jobs, and the names of live API tokens (``new_tokens``: those a test made)."""
    workers = await server.ok("GET", "/api/admin/workers")
    jobs = await server.ok("GET", "/api/queue")
    tokens = (await server.ok("GET", "/api/admin/tokens"))["tokens"]
    live = sorted({t["name"] for t in tokens if t["revoked_at"] is None} - set(new_tokens))
    return json.dumps([workers, jobs, live], sort_keys=True)


def _ids(spec: RouteSpec) -> str:
    return f"{spec.method} {spec.path}"


@pytest.mark.parametrize("spec", SPECS, ids=_ids)
async def test_credentials_matrix(fx: Fixture, spec: RouteSpec) -> None:
    server = fx.server
    before = await state_of(server)
    kind, permission = spec.auth.kind, spec.auth.permission
    worker_token = {"X-Worker-Token": fx.owner.token}
    if kind == "none":
        status, _, _ = await fx.call(spec, {})
        assert status == 200
        return

    if kind == "upload":
        refusals = {
            "no token": {},
            "wrong token": {"X-Upload-Token": "ut_" + "z" * 43},
            "worker token as upload token": {"X-Upload-Token": fx.owner.token},
            "API token as upload token": {"X-Upload-Token": fx.server.admin_token},
            "API token as bearer": server.admin,
            "worker token header": worker_token,
        }
        for case, headers in refusals.items():
            status, body, _ = await fx.call(spec, headers)
            assert status == 401, case
            assert body is not None
            assert body["detail"] in (UPLOAD_UNKNOWN, UPLOAD_MISSING), case
    elif kind == "worker":
        refusals = {
            "no token": {},
            "wrong token": {"X-Worker-Token": WRONG_WORKER_TOKEN},
            "blank token": {"X-Worker-Token": "   "},
            "API token as worker token": {"X-Worker-Token": fx.server.admin_token},
            "API token as bearer": server.admin,
        }
        for case, headers in refusals.items():
            status, body, _ = await fx.call(spec, headers)
            wrong_kind = headers.get("X-Worker-Token", "").startswith("tf_")
            expected = API_TOKEN_AS_WORKER if wrong_kind else WORKER_UNAUTHORIZED
            assert (status, body) == (401, {"detail": expected}), case
    else:
        refusals = {
            "no token": {},
            "wrong token": server.bearer(WRONG_API_TOKEN),
            "not bearer": {"Authorization": f"Basic {fx.server.admin_token}"},
            "worker token as bearer": server.bearer(fx.owner.token),
            "worker token header": worker_token,
        }
        for case, headers in refusals.items():
            status, body, resp_headers = await fx.call(spec, headers)
            expected = WORKER_TOKEN_AS_API if case == "worker token as bearer" else API_UNAUTHORIZED
            assert (status, body) == (401, {"detail": expected}), case
            assert resp_headers["WWW-Authenticate"] == "Bearer", case
        # A token with every permission but this route's own.
        others = [p for p in ALL_PERMISSIONS if p != permission]
        lacking = server.bearer(await server.api_token(*others, name="lacking"))
        status, body, _ = await fx.call(spec, lacking)
        if permission is not None:
            assert (status, body) == (403, {"detail": f"Permission denied: {permission}"})
        else:
            assert status not in (401, 403), body  # any valid token reads
        # A revoked token that had the permission.
        revoked = await server.ok(
            "POST", "/api/admin/tokens", {"name": "revoked", "permissions": list(ALL_PERMISSIONS)}
        )
        await server.ok("DELETE", f"/api/admin/tokens/{revoked['id']}")
        status, body, _ = await fx.call(spec, server.bearer(revoked["token"]))
        assert (status, body) == (401, {"detail": API_UNAUTHORIZED})

    assert await state_of(server, "lacking") == before
    denied = await server.audit(outcome="denied")
    targets = {e["target"] for e in denied}
    assert f"{spec.method} {fx.path(spec).split('?')[0]}" in targets
    assert all(e["kind"] in ("auth.failed", "worker.register_failed") for e in denied)
    if spec.path == "/api/workers/register":
        assert {e["kind"] for e in denied} == {"worker.register_failed"}


@pytest.mark.parametrize("spec", [s for s in SPECS if s.path in NAMES_WORKER | NAMES_JOB], ids=_ids)
async def test_another_workers_token(fx: Fixture, spec: RouteSpec) -> None:
    """The stranger's valid token, naming the owner (or the owner's job)."""
    before = await state_of(fx.server)
    status, body, _ = await fx.call(spec, fx.stranger.headers, worker_id=fx.owner.worker_id)
    if spec.path in NAMES_JOB:
        assert (status, body) == (403, {"detail": "Worker not assigned to this job"})
    else:
        assert (status, body) == (400, {"detail": "Worker ID mismatch"})
    assert await state_of(fx.server) == before


@pytest.mark.parametrize("spec", [s for s in SPECS if s.auth.kind == "worker"], ids=_ids)
async def test_own_token_passes(fx: Fixture, spec: RouteSpec) -> None:
    """The control: the same requests with the right worker token are not refused."""
    if spec.path == "/api/workers/disconnect":
        pytest.skip("accepted disconnects are tested in test_api_workers")
    status, body, _ = await fx.call(spec, fx.owner.headers)
    assert status == 200, body
