"""The security matrix where tests/server/test_api_auth_matrix.py stops: a worker token
that was rotated away or whose worker was deleted, on every worker route; every single
permission against every API route; and for each refusal exactly one audit record, with
the reason and without the token.

In-process (tests/server's ``server`` fixture): fast, and the audit is read back through
the API as an operator would."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tunefleet.http.auth import ALL_PERMISSIONS, API_UNAUTHORIZED, WORKER_UNAUTHORIZED
from tunefleet.http.openapi import RouteSpec
from tunefleet.http.route_table import routes

WORKER_SPECS = [s for s in routes.specs if s.auth.kind == "worker"]
API_SPECS = [s for s in routes.specs if s.auth.kind == "api"]


def _ids(spec: RouteSpec) -> str:
    return f"{spec.method} {spec.path}"


def fill(spec: RouteSpec, worker_id: str, job_id: str, token_id: str = "999999") -> str:
    path = (
        spec.path.replace("{worker_id}", worker_id)
        .replace("{job_id}", job_id)
        .replace("{token_id}", token_id)
        .replace("{rule_id}", "1")
        .replace("{name}", "default" if "/teams/" in spec.path else "admin")
        .replace("{user}", "admin")
    )
    if spec.path in ("/api/workers/stream", "/api/workers/queue"):
        path += f"?worker_id={worker_id}"
    return path


def body_for(spec: RouteSpec, worker_id: str, permission: str = "queue.submit") -> Any:
    if spec.method in ("GET", "DELETE"):
        return None
    return {
        "name": "probe",
        "worker_id": worker_id,
        "status": "running",
        "lines": [],
        "config_name": "tiny",
        "permissions": [permission],
    }


async def request(
    server: Any, spec: RouteSpec, path: str, headers: dict[str, str], body: Any
) -> tuple[int, Any]:
    resp = await server.client.request(spec.method, path, json=body, headers=headers)
    status = resp.status
    data = json.loads(await resp.text()) if status >= 400 else None
    resp.close()  # an accepted stream would stay open
    return status, data


async def last_audit_id(server: Any) -> int:
    events = await server.audit()
    return max((e["id"] for e in events), default=0)


async def audit_since(server: Any, mark: int) -> list[dict[str, Any]]:
    return [e for e in await server.audit() if e["id"] > mark]


def assert_no_secret(*secrets: str, within: Any) -> None:
    text = json.dumps(within)
    for secret in secrets:
        assert secret not in text and secret[3:] not in text


@pytest.mark.parametrize("how", ["rotated", "deleted"])
@pytest.mark.parametrize("spec", WORKER_SPECS, ids=_ids)
async def test_a_dead_worker_token_is_refused_on_every_worker_route(
    server: Any, spec: RouteSpec, how: str
) -> None:
    """After rotation (or deletion of its worker) the old token is as good as none: 401
    with the protocol's words, one audit record naming the reason, nothing changed."""
    owner = await server.connected_worker("owner")
    job_id = await server.running_job(owner)
    old_token, worker_id = owner.token, owner.worker_id or ""
    if how == "rotated":
        new_token = (await server.ok("POST", f"/api/admin/workers/{worker_id}/token"))["token"]
    else:
        await server.ok("DELETE", f"/api/admin/workers/{worker_id}?force=true")
    job_before = await server.job(job_id)
    mark = await last_audit_id(server)

    path = fill(spec, worker_id, job_id)
    status, data = await request(
        server, spec, path, {"X-Worker-Token": old_token}, body_for(spec, worker_id)
    )

    assert (status, data) == (401, {"detail": WORKER_UNAUTHORIZED})
    (record,) = await audit_since(server, mark)
    expected_kind = (
        "worker.register_failed" if spec.path == "/api/workers/register" else "auth.failed"
    )
    assert (record["kind"], record["outcome"]) == (expected_kind, "denied")
    assert record["target"] == f"{spec.method} {path.split('?')[0]}"
    assert record["detail"]["reason"] == "unknown or revoked worker token"
    assert record["client_address"] == "127.0.0.1"
    assert_no_secret(old_token, within=record)
    job_after = await server.job(job_id)
    assert job_after["status"] == job_before["status"]
    assert job_after["progress"] == job_before["progress"]
    if how == "rotated":
        # The control: the new token opens the same route.
        status, _ = await request(
            server, spec, path, {"X-Worker-Token": new_token}, body_for(spec, worker_id)
        )
        assert status != 401


async def test_each_permission_alone_against_every_api_route(server: Any) -> None:
    """A token holding one permission: exactly the routes that need another one say 403
    ``Permission denied: <it>`` and are audited with the token's id; every other route
    lets it past authorization. Ids are unknown ones, so permitted calls change nothing."""
    owner = await server.connected_worker("owner")
    tokens = {}
    for permission in ALL_PERMISSIONS:
        created = await server.ok(
            "POST",
            "/api/admin/tokens",
            {"name": f"only-{permission.replace('.', '-')}", "permissions": [permission]},
        )
        tokens[permission] = created
    for permission, created in tokens.items():
        headers = server.bearer(created["token"])
        for spec in API_SPECS:
            mark = await last_audit_id(server)
            path = fill(spec, "w_missing", "j_missing")
            if spec.content_type == "text/event-stream" and spec.auth.permission in (
                None,
                permission,
            ):
                continue  # a permitted stream would stay open; test_api_auth_matrix covers it
            status, data = await request(
                server, spec, path, headers, body_for(spec, owner.worker_id or "", permission)
            )
            needed = spec.auth.permission
            if needed is not None and needed != permission:
                assert (status, data) == (403, {"detail": f"Permission denied: {needed}"}), (
                    permission,
                    _ids(spec),
                )
                (record,) = await audit_since(server, mark)
                assert (record["kind"], record["outcome"]) == ("auth.failed", "denied")
                assert record["detail"]["reason"] == f"token {created['id']} lacks {needed}"
                assert_no_secret(created["token"], within=record)
            else:
                assert status not in (401, 403), (permission, _ids(spec), status, data)


async def test_a_revoked_token_is_refused_even_mid_session(server: Any) -> None:
    """Revocation takes effect on the very next request, not after a cache expires."""
    created = await server.ok(
        "POST", "/api/admin/tokens", {"name": "ci", "permissions": ["queue.submit"]}
    )
    headers = server.bearer(created["token"])
    assert (await server.client.get("/api/queue", headers=headers)).status == 200
    await server.ok("DELETE", f"/api/admin/tokens/{created['id']}")
    mark = await last_audit_id(server)
    resp = await server.client.get("/api/queue", headers=headers)
    assert (resp.status, await resp.json()) == (401, {"detail": API_UNAUTHORIZED})
    (record,) = await audit_since(server, mark)
    assert record["detail"]["reason"] == "unknown or revoked API token"
    assert_no_secret(created["token"], within=record)
