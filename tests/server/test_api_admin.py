"""Admin endpoints: list, create (token once, only its hash stored), drain/resume, token
rotation, delete, and API tokens with their permission checks."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.server.protocol import WorkerClient, eventually

# --- list -------------------------------------------------------------------------------


async def test_list_shows_ids_flat_gpus_connection_and_uptime(server: Any) -> None:
    online = await server.connected_worker("online", labels={"site": "dc-a"})
    await server.create_worker("never-connected")
    await server.clock.advance(42)
    data = await server.ok("GET", "/api/admin/workers")
    assert data["total"] == 2
    by_name = {w["name"]: w for w in data["workers"]}
    view = by_name["online"]
    assert view["id"] == view["worker_id"] == online.worker_id
    assert (view["gpu_count"], view["gpu_name"], view["gpu_vram_gb"]) == (
        2,
        "NVIDIA A100-SXM4-80GB",
        80.0,
    )
    assert view["gpu_info"]["count"] == 2
    assert view["status"] == "idle"
    assert view["worker_type"] == "persistent"
    assert view["labels"] == {"site": "dc-a"}
    assert view["connected"] is True
    assert view["uptime_seconds"] == 42.0
    assert view["current_job_id"] is None
    assert view["last_heartbeat"].endswith("Z")
    for key in ("connected_at", "created_at"):
        assert view[key].endswith("Z")
    idle = by_name["never-connected"]
    assert (idle["status"], idle["connected"], idle["uptime_seconds"]) == ("connecting", False, 0)
    assert "token" not in view and "token_hash" not in view
    online.close()


async def test_list_connected_is_false_once_the_stream_closes(server: Any) -> None:
    worker = await server.connected_worker()
    worker.close()

    async def disconnected() -> bool:
        return (await server.worker_view(worker.worker_id))["connected"] is False

    await eventually(disconnected, "connected to become false")


async def test_list_filters_by_status(server: Any) -> None:
    idle = await server.connected_worker("idle-one")
    await server.create_worker("connecting-one")
    data = await server.ok("GET", "/api/admin/workers?status=idle")
    assert [w["worker_id"] for w in data["workers"]] == [idle.worker_id]
    assert data["total"] == 1
    data = await server.ok("GET", "/api/admin/workers?status=offline")
    assert data == {"workers": [], "total": 0}
    idle.close()


async def test_list_with_an_unknown_status_is_400(server: Any) -> None:
    resp = await server.get("/api/admin/workers?status=sleeping")
    assert resp.status == 400
    detail = (await resp.json())["detail"]
    assert detail.startswith("status:")
    assert "\n" not in detail


async def test_get_unknown_worker_is_404(server: Any) -> None:
    resp = await server.get("/api/admin/workers/w_nope")
    assert resp.status == 404
    assert await resp.json() == {"detail": "Worker not found: w_nope"}


# --- create -----------------------------------------------------------------------------


def _db_bytes(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(data_dir.glob("tunefleet.db*")))


async def test_create_shows_the_token_once_and_stores_only_its_hash(server: Any) -> None:
    body = {"name": "gpu-1", "worker_type": "ephemeral", "labels": {"gpu_type": "a100"}}
    data = await server.ok("POST", "/api/admin/workers", body)
    token = data["token"]
    assert token.startswith("wt_") and len(token) > 40
    assert data["worker_id"].startswith("w_")
    assert (data["name"], data["worker_type"], data["labels"]) == (
        "gpu-1",
        "ephemeral",
        {"gpu_type": "a100"},
    )
    assert token in data["connection_command"]
    assert data["environment"]["SIMPLETUNER_WORKER_TOKEN"] == token
    # Nowhere else: not in the list, the worker view, the audit log.
    for path in ("/api/admin/workers", f"/api/admin/workers/{data['worker_id']}", "/api/audit"):
        assert token not in await (await server.get(path)).text()
    # The database holds the SHA-256 hash and never the token.
    digest = hashlib.sha256(token.encode()).hexdigest()
    with sqlite3.connect(server.data_dir / "tunefleet.db") as db:
        rows = db.execute("SELECT worker_id, token_hash FROM worker_token").fetchall()
    assert rows == [(data["worker_id"], digest)]
    assert token.encode() not in _db_bytes(server.data_dir)
    assert token.encode() not in (server.data_dir / "audit.jsonl").read_bytes()
    # And the token works.
    assert (await WorkerClient(server.client, token).register("gpu-1"))["worker_id"] == data[
        "worker_id"
    ]


async def test_a_second_worker_of_one_name_is_409_unless_asked_for(server: Any) -> None:
    first = await server.ok("POST", "/api/admin/workers", {"name": "gpu-a"})
    resp = await server.post("/api/admin/workers", {"name": "gpu-a"})
    assert resp.status == 409
    assert (await resp.json())["detail"] == (
        f"a worker named 'gpu-a' exists ({first['worker_id']}); choose another name, or send "
        "?allow_duplicate=true (tunefleet workers create --allow-duplicate)"
    )
    assert (await server.ok("GET", "/api/admin/workers"))["total"] == 1
    again = await server.ok("POST", "/api/admin/workers?allow_duplicate=true", {"name": "gpu-a"})
    assert again["worker_id"] != first["worker_id"]
    assert (await server.ok("GET", "/api/admin/workers"))["total"] == 2


async def test_two_creates_of_one_name_at_once_make_one_worker(server: Any) -> None:
    body = {"name": "racer"}
    first, second = await asyncio.gather(
        server.post("/api/admin/workers", body), server.post("/api/admin/workers", body)
    )
    assert sorted([first.status, second.status]) == [200, 409]


async def test_the_agents_own_type_and_name_are_shown_when_they_differ(server: Any) -> None:
    worker = await server.create_worker("gpu-b", worker_type="persistent")
    answer = await worker.register("my-laptop", persistent=False)
    warnings = [
        "worker_type is persistent but its agent was started ephemeral (--persistent / "
        "SIMPLETUNER_WORKER_PERSISTENT): tunefleet's agent follows worker_type, another agent "
        "exits after one job. Start the agent with --persistent.",
        "the agent calls itself 'my-laptop' (--name / SIMPLETUNER_WORKER_NAME); this "
        "worker's name is 'gpu-b'",
    ]
    assert (answer["name"], answer["worker_type"], answer["warnings"]) == (
        "gpu-b",
        "persistent",
        warnings,
    )
    view = await server.worker_view(worker.worker_id)
    assert (view["name"], view["agent_name"], view["warnings"]) == ("gpu-b", "my-laptop", warnings)
    await worker.register("gpu-b", persistent=True)
    view = await server.worker_view(worker.worker_id)
    assert (view["agent_name"], view["warnings"]) == ("gpu-b", [])


async def test_the_agents_name_survives_a_restart(make_server: Any) -> None:
    first = await make_server()
    worker = await first.create_worker("gpu-c")
    await worker.register("other-name")
    await first.client.close()
    second = await make_server()
    assert (await second.worker_view(worker.worker_id))["agent_name"] == "other-name"


async def test_create_refuses_unknown_fields(server: Any) -> None:
    resp = await server.post("/api/admin/workers", {"name": "w", "label": {"a": "b"}})
    assert resp.status == 400
    assert "label" in (await resp.json())["detail"]
    assert (await server.ok("GET", "/api/admin/workers"))["total"] == 0


# --- drain and resume -------------------------------------------------------------------


async def test_drain_pushes_drain_and_takes_no_more_jobs(server: Any) -> None:
    worker = await server.connected_worker()
    data = await server.ok("POST", f"/api/admin/workers/{worker.worker_id}/drain")
    assert data == {"success": True, "worker_id": worker.worker_id, "status": "draining"}
    frame = await worker.stream.expect("drain")
    assert frame.data == {"type": "drain"}
    submitted = await server.submit(target="worker")
    assert submitted["status"] == "pending"
    assert submitted["reason"]
    await worker.stream.expect_nothing()
    worker.close()


async def test_drain_is_sticky_across_heartbeat_and_reregistration(server: Any) -> None:
    worker = await server.connected_worker()
    await server.ok("POST", f"/api/admin/workers/{worker.worker_id}/drain")
    await worker.stream.expect("drain")
    assert (await worker.heartbeat(status="idle")).status == 200
    assert (await server.worker_view(worker.worker_id))["status"] == "draining"
    worker.close()
    await worker.register()
    view = await server.worker_view(worker.worker_id)
    assert (view["status"], view["drain_requested"]) == ("draining", True)
    stream = await worker.open_stream()
    await stream.expect("drain")  # told again on every new stream
    job_id = (await server.submit(target="worker"))["job_id"]
    await stream.expect_nothing()
    assert (await server.job(job_id))["status"] == "pending"
    worker.close()


async def test_draining_busy_worker_finishes_its_job_then_stays_draining(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    await server.ok("POST", f"/api/admin/workers/{worker.worker_id}/drain")
    await worker.stream.expect("drain")
    assert (await server.job(job_id))["status"] == "running"
    assert (await worker.report(job_id, "completed")).status == 200
    await server.wait_job(job_id, "completed")
    await server.submit(target="worker")
    await worker.stream.expect_nothing()
    assert (await server.worker_view(worker.worker_id))["status"] == "draining"
    worker.close()


async def test_resume_undoes_a_drain_and_the_worker_takes_jobs_again(server: Any) -> None:
    worker = await server.connected_worker()
    await server.ok("POST", f"/api/admin/workers/{worker.worker_id}/drain")
    await worker.stream.expect("drain")
    job_id = (await server.submit(target="worker"))["job_id"]
    data = await server.ok("POST", f"/api/admin/workers/{worker.worker_id}/resume")
    assert data == {"success": True, "worker_id": worker.worker_id, "status": "idle"}
    assert (await worker.stream.expect("job_submit")).data["job_id"] == job_id
    worker.close()


async def test_resume_of_a_worker_that_is_not_draining_is_409(server: Any) -> None:
    worker = await server.connected_worker()
    resp = await server.post(f"/api/admin/workers/{worker.worker_id}/resume")
    assert resp.status == 409
    assert "not draining" in (await resp.json())["detail"]
    assert (await server.worker_view(worker.worker_id))["status"] == "idle"
    worker.close()


@pytest.mark.parametrize("action", ["drain", "resume", "token"])
async def test_actions_on_an_unknown_worker_are_404(server: Any, action: str) -> None:
    resp = await server.post(f"/api/admin/workers/w_nope/{action}")
    assert resp.status == 404
    assert await resp.json() == {"detail": "Worker not found: w_nope"}


# --- token rotation ---------------------------------------------------------------------


async def test_rotation_kills_the_old_token_at_once_and_closes_its_stream(server: Any) -> None:
    worker = await server.connected_worker()
    old_stream = worker.stream
    data = await server.ok("POST", f"/api/admin/workers/{worker.worker_id}/token")
    new_token = data["token"]
    assert new_token.startswith("wt_") and new_token != worker.token
    assert data["worker_id"] == worker.worker_id
    assert new_token in data["connection_command"]
    await old_stream.expect_closed()
    resp = await worker.heartbeat()
    assert resp.status == 401
    assert await resp.json() == {"detail": "Invalid worker token"}
    assert (await worker.open_stream()).status == 401
    worker.token = new_token
    assert (await worker.register())["worker_id"] == worker.worker_id
    stream = await worker.open_stream()
    assert stream.status == 200
    digest = hashlib.sha256(new_token.encode()).hexdigest()
    with sqlite3.connect(server.data_dir / "tunefleet.db") as db:
        live = db.execute("SELECT token_hash FROM worker_token WHERE revoked_at IS NULL").fetchall()
    assert live == [(digest,)]
    worker.close()


# --- delete -----------------------------------------------------------------------------


async def test_delete_of_an_idle_persistent_worker_advises_the_forced_delete(
    server: Any,
) -> None:
    # Draining never takes a persistent worker offline: advice to wait for that would
    # never come true. The advice given must work when followed.
    worker = await server.connected_worker()
    for status in ("idle", "draining"):
        resp = await server.delete(f"/api/admin/workers/{worker.worker_id}")
        assert resp.status == 409
        detail = (await resp.json())["detail"]
        assert detail.startswith(f"worker {worker.worker_id} is {status} and runs no job")
        assert "delete it with ?force=true (its agent is told to stop" in detail
        assert "wait until it is offline" not in detail
        if status == "idle":
            await server.ok("POST", f"/api/admin/workers/{worker.worker_id}/drain")
    await server.clock.advance(60)  # well within the heartbeat timeout: still draining
    assert (await server.worker_view(worker.worker_id))["status"] == "draining"
    deleted = await server.ok("DELETE", f"/api/admin/workers/{worker.worker_id}?force=true")
    assert deleted["requeued_job_id"] is None
    await worker.stream.expect("drain")
    assert (await worker.stream.expect("shutdown")).data["reason"]
    worker.close()


async def test_delete_of_an_idle_ephemeral_worker_advises_a_drain_that_works(
    server: Any,
) -> None:
    worker = await server.create_worker("one-shot", worker_type="ephemeral")
    await worker.connect("one-shot")
    resp = await server.delete(f"/api/admin/workers/{worker.worker_id}")
    detail = (await resp.json())["detail"]
    assert resp.status == 409 and "drain it: its ephemeral agent then exits" in detail
    await server.ok("POST", f"/api/admin/workers/{worker.worker_id}/drain")
    await worker.stream.expect("drain")
    await worker.stream.expect("shutdown")  # what makes an ephemeral agent leave
    await worker.disconnect()
    await server.wait_worker(worker.worker_id, "offline")
    await server.ok("DELETE", f"/api/admin/workers/{worker.worker_id}")
    worker.close()


async def test_delete_of_a_busy_worker_names_its_job(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    resp = await server.delete(f"/api/admin/workers/{worker.worker_id}")
    assert resp.status == 409
    detail = (await resp.json())["detail"]
    assert f"is busy with job {job_id}: drain it to let the job finish" in detail
    assert detail.endswith("or use ?force=true now and the job goes back to the queue")
    worker.close()


async def test_delete_of_an_offline_worker(server: Any) -> None:
    worker = await server.connected_worker()
    worker.close()
    await worker.disconnect()
    data = await server.ok("DELETE", f"/api/admin/workers/{worker.worker_id}")
    assert data == {"success": True, "worker_id": worker.worker_id, "requeued_job_id": None}
    assert (await server.get(f"/api/admin/workers/{worker.worker_id}")).status == 404
    resp = await worker.post("/api/workers/register", {"name": "gone"})
    assert resp.status == 401


async def test_delete_of_a_worker_that_never_connected(server: Any) -> None:
    # Nothing runs there (a cloud instance that never came up): no drain needed.
    worker = await server.create_worker("never-came-up")
    assert (await server.worker_view(worker.worker_id))["status"] == "connecting"
    deleted = await server.ok("DELETE", f"/api/admin/workers/{worker.worker_id}")
    assert deleted["success"] is True
    resp = await server.get(f"/api/admin/workers/{worker.worker_id}", headers=server.admin)
    assert resp.status == 404


async def test_forced_delete_requeues_the_job(server: Any) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker)
    data = await server.ok("DELETE", f"/api/admin/workers/{worker.worker_id}?force=true")
    assert data["requeued_job_id"] == job_id
    job = await server.wait_job(job_id, "pending")
    assert "deleted" in job["attempt_history"][0]["reason"]
    # Another worker picks it up.
    other = await server.connected_worker("other")
    assert (await other.take_job())["job_id"] == job_id
    other.close()


async def test_delete_unknown_worker_is_404_and_bad_force_is_400(server: Any) -> None:
    resp = await server.delete("/api/admin/workers/w_nope")
    assert resp.status == 404
    worker = await server.create_worker()
    resp = await server.delete(f"/api/admin/workers/{worker.worker_id}?force=maybe")
    assert resp.status == 400
    assert (await server.worker_view(worker.worker_id))["status"] == "connecting"


# --- API tokens -------------------------------------------------------------------------


async def test_api_token_create_list_revoke(server: Any) -> None:
    created = await server.ok(
        "POST", "/api/admin/tokens", {"name": "ci", "permissions": ["queue.submit"]}
    )
    token = created["token"]
    assert token.startswith("tf_")
    assert created["permissions"] == ["queue.submit"]
    listed = await server.ok("GET", "/api/admin/tokens")
    names = {t["name"]: t for t in listed["tokens"]}
    assert set(names) == {"admin", "ci"}
    assert token not in str(listed)
    assert all("token" not in t and "token_hash" not in t for t in listed["tokens"])
    with sqlite3.connect(server.data_dir / "tunefleet.db") as db:
        hashes = {h for (h,) in db.execute("SELECT token_hash FROM api_token")}
    assert hashlib.sha256(token.encode()).hexdigest() in hashes
    assert token.encode() not in _db_bytes(server.data_dir)
    # The new token submits…
    ci = server.bearer(token)
    resp = await server.post("/api/queue/submit", {"config_name": "tiny"}, headers=ci)
    assert resp.status == 200
    # …until revoked.
    revoked = await server.ok("DELETE", f"/api/admin/tokens/{created['id']}")
    assert revoked == {"success": True, "id": created["id"]}
    resp = await server.post("/api/queue/submit", {"config_name": "tiny"}, headers=ci)
    assert resp.status == 401
    listed = await server.ok("GET", "/api/admin/tokens")
    assert {t["name"]: t["revoked_at"] is not None for t in listed["tokens"]}["ci"] is True


async def test_revoke_unknown_token_is_404(server: Any) -> None:
    for token_id in ("999", "abc"):
        resp = await server.delete(f"/api/admin/tokens/{token_id}")
        assert resp.status == 404
        assert "not found" in (await resp.json())["detail"]


async def test_a_token_cannot_grant_what_it_lacks(server: Any) -> None:
    manager = await server.api_token("admin.workers", "queue.submit", name="manager")
    headers = server.bearer(manager)
    resp = await server.post(
        "/api/admin/tokens", {"name": "x", "permissions": ["audit.read"]}, headers=headers
    )
    assert resp.status == 403
    assert await resp.json() == {
        "detail": "Permission denied: cannot grant audit.read, which this token lacks"
    }
    resp = await server.post(
        "/api/admin/tokens",
        {"name": "x", "permissions": ["queue.submit", "queue.admin"]},
        headers=headers,
    )
    assert resp.status == 403
    names = [t["name"] for t in (await server.ok("GET", "/api/admin/tokens"))["tokens"]]
    assert "x" not in names
    resp = await server.post(
        "/api/admin/tokens", {"name": "ok", "permissions": ["queue.submit"]}, headers=headers
    )
    assert resp.status == 200


async def test_token_without_admin_workers_cannot_manage_tokens(server: Any) -> None:
    submitter = server.bearer(await server.api_token("queue.submit"))
    for method, path in (
        ("GET", "/api/admin/tokens"),
        ("POST", "/api/admin/tokens"),
        ("DELETE", "/api/admin/tokens/1"),
    ):
        resp = await server.client.request(
            method, path, json={"name": "x", "permissions": ["queue.submit"]}, headers=submitter
        )
        assert resp.status == 403
        assert await resp.json() == {"detail": "Permission denied: admin.workers"}
    # The admin token (id 1) is still valid.
    assert (await server.get("/api/admin/tokens")).status == 200


@pytest.mark.parametrize(
    "body",
    [
        {"name": "x", "permissions": ["root"]},
        {"name": "x", "permissions": ["queue.submit"] * 17},
        {"name": "x", "user": "not a name"},
        {"permissions": ["queue.submit"]},
        {"name": "x", "permissions": "queue.submit"},
        {"name": "x", "permissions": ["queue.submit"], "expires": 1},
    ],
)
async def test_api_token_bad_bodies_are_400(server: Any, body: dict[str, Any]) -> None:
    resp = await server.post("/api/admin/tokens", body)
    assert resp.status == 400
    assert (await resp.json())["detail"]
    assert (await server.ok("GET", "/api/admin/tokens"))["total"] == 1


async def test_api_token_last_used_is_recorded(server: Any) -> None:
    used = await server.api_token("queue.submit", name="used")
    await server.api_token("queue.submit", name="idle")
    assert (await server.get("/api/queue", headers=server.bearer(used))).status == 200
    tokens = {t["name"]: t for t in (await server.ok("GET", "/api/admin/tokens"))["tokens"]}
    assert tokens["used"]["last_used_at"] is not None
    assert tokens["used"]["last_used_at"].endswith("Z")
    assert tokens["idle"]["last_used_at"] is None
    assert tokens["admin"]["last_used_at"] is not None


async def test_draining_an_idle_ephemeral_worker_also_shuts_it_down(server: Any) -> None:
    worker = await server.create_worker("eph", worker_type="ephemeral")
    await worker.connect("eph", persistent=False)
    await server.ok("POST", f"/api/admin/workers/{worker.worker_id}/drain")
    await worker.stream.expect("drain")
    assert (await worker.stream.expect("shutdown")).data["reason"]
    worker.close()
