"""Users, teams and their tokens over the API: the admin surfaces, a token narrowed to its
user's role, a disabled user's tokens refused, the last admin kept, every change audited."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import Server, bearer
from tests.server.users_testkit import make_user, three_people


async def _status(server: Server, method: str, path: str, body: Any = None, **kw: Any) -> Any:
    resp = await server.client.request(
        method, path, json=body, headers=kw.get("headers", server.admin)
    )
    return resp.status, await resp.json()


async def test_a_new_orchestrator_has_the_admin_user_in_the_default_team(server: Server) -> None:
    me = await server.ok("GET", "/api/auth/whoami")
    assert (me["user"], me["role"], me["teams"], me["default_team"]) == (
        "admin",
        "admin",
        ["default"],
        "default",
    )
    users = await server.ok("GET", "/api/admin/users")
    assert [u["name"] for u in users["users"]] == ["admin"]
    tokens = await server.ok("GET", "/api/admin/tokens")
    assert [t["user"] for t in tokens["tokens"]] == ["admin"]


async def test_users_and_teams_are_created_shown_and_listed(server: Server) -> None:
    await server.ok("POST", "/api/admin/teams", {"name": "ml"})
    await server.ok("POST", "/api/admin/teams", {"name": "vision"})
    alice = await server.ok(
        "POST",
        "/api/admin/users",
        {
            "name": "alice",
            "role": "researcher",
            "teams": ["ml", "vision"],
            "grants": ["queue.local"],
        },
    )
    assert alice["teams"] == [{"name": "ml", "default": True}, {"name": "vision", "default": False}]
    assert alice["permissions"] == ["queue.submit", "queue.local"]
    assert alice["default_team"] == "ml" and alice["disabled"] is False
    assert (await server.ok("GET", "/api/admin/users/alice"))["role"] == "researcher"
    team = await server.ok(
        "POST", "/api/admin/teams/vision/members", {"user": "admin", "default": True}
    )
    assert {"user": "admin", "default": True} in team["members"]
    me = await server.ok("GET", "/api/auth/whoami")
    assert me["default_team"] == "vision"
    teams = await server.ok("GET", "/api/admin/teams")
    assert [t["name"] for t in teams["teams"]] == ["default", "ml", "vision"]
    removed = await server.ok("DELETE", "/api/admin/teams/vision/members/alice")
    assert removed == {"success": True, "team": "vision", "user": "alice"}
    shown = await server.ok("GET", "/api/admin/teams/vision")
    assert [m["user"] for m in shown["members"]] == ["admin"]
    kinds = [e["kind"] for e in await server.audit()]
    for kind in ("team.created", "user.created", "team.member_added", "team.member_removed"):
        assert kind in kinds


async def test_unknown_users_and_teams_are_404s_naming_them(server: Server) -> None:
    cases = [
        ("GET", "/api/admin/users/ghost", None, "unknown user: ghost"),
        ("POST", "/api/admin/users/ghost/disable", None, "unknown user: ghost"),
        ("POST", "/api/admin/users/ghost/role", {"role": "viewer"}, "unknown user: ghost"),
        ("GET", "/api/admin/teams/nope", None, "unknown team: nope"),
        ("POST", "/api/admin/teams/nope/members", {"user": "admin"}, "unknown team: nope"),
        ("POST", "/api/admin/teams/default/members", {"user": "ghost"}, "unknown user: ghost"),
        ("DELETE", "/api/admin/teams/nope/members/admin", None, "unknown team: nope"),
        ("POST", "/api/admin/users", {"name": "bo", "teams": ["nope"]}, "unknown team: nope"),
        ("POST", "/api/admin/tokens", {"name": "t", "user": "ghost"}, "unknown user: ghost"),
    ]
    for method, path, body, words in cases:
        status, data = await _status(server, method, path, body)
        assert status == 404, (path, data)
        assert data["detail"].startswith(words), (path, data)
    status, data = await _status(server, "DELETE", "/api/admin/teams/default/members/ghost")
    assert (status, data["detail"].split(";")[0]) == (404, "unknown user: ghost")
    # Nothing was made by the refusals.
    assert [u["name"] for u in (await server.ok("GET", "/api/admin/users"))["users"]] == ["admin"]


async def test_duplicates_and_bad_roles_are_refused(server: Server) -> None:
    await server.ok("POST", "/api/admin/users", {"name": "alice"})
    status, data = await _status(server, "POST", "/api/admin/users", {"name": "alice"})
    assert (status, data["detail"]) == (409, "a user named alice exists already")
    status, data = await _status(server, "POST", "/api/admin/teams", {"name": "default"})
    assert (status, data["detail"]) == (409, "a team named default exists already")
    status, data = await _status(server, "POST", "/api/admin/users", {"name": "b", "role": "root"})
    assert status == 400 and data["detail"].startswith("role: must be 'viewer'")
    status, data = await _status(
        server, "POST", "/api/admin/users", {"name": "b", "grants": ["admin.workers"]}
    )
    assert status == 400 and "grants[0]" in data["detail"]


async def test_the_last_enabled_admin_cannot_be_disabled_or_demoted(server: Server) -> None:
    status, data = await _status(server, "POST", "/api/admin/users/admin/disable")
    assert status == 409
    assert data["detail"] == (
        "admin is the last enabled admin: disabling them would leave nobody to administer "
        "the fleet; make another user admin first"
    )
    status, data = await _status(server, "POST", "/api/admin/users/admin/role", {"role": "lead"})
    assert status == 409 and "making them lead" in data["detail"]
    me = await server.ok("GET", "/api/auth/whoami")
    assert me["role"] == "admin"
    # With a second admin, the first may step down.
    await server.ok("POST", "/api/admin/users", {"name": "root2", "role": "admin"})
    demoted = await server.ok("POST", "/api/admin/users/admin/role", {"role": "lead"})
    assert demoted["role"] == "lead"


async def test_a_token_is_refused_more_than_its_users_role(server: Server) -> None:
    await server.ok("POST", "/api/admin/users", {"name": "alice", "role": "researcher"})
    body = {
        "name": "t",
        "user": "alice",
        "permissions": ["queue.submit", "admin.workers", "audit.read"],
    }
    status, data = await _status(server, "POST", "/api/admin/tokens", body)
    assert status == 403
    assert data["detail"] == (
        "Permission denied: user alice's role researcher does not include admin.workers, "
        "audit.read; ask for fewer permissions or change the role"
    )
    tokens = await server.ok("GET", "/api/admin/tokens")
    assert [t["user"] for t in tokens["tokens"]] == ["admin"]  # nothing made
    narrow = await server.ok(
        "POST", "/api/admin/tokens", {"name": "ro", "user": "alice", "permissions": []}
    )
    assert (narrow["user"], narrow["permissions"]) == ("alice", [])
    whole = await server.ok("POST", "/api/admin/tokens", {"name": "all", "user": "alice"})
    assert whole["permissions"] == ["queue.submit"]


async def test_tokens_without_a_user_are_the_callers_and_others_need_admin_users(
    server: Server,
) -> None:
    ops = await server.ok(
        "POST",
        "/api/admin/tokens",
        {"name": "ops", "permissions": ["admin.workers", "queue.submit"]},
    )
    assert ops["user"] == "admin"
    await server.ok("POST", "/api/admin/users", {"name": "alice"})
    body = {"name": "t", "user": "alice", "permissions": ["queue.submit"]}
    status, data = await _status(
        server, "POST", "/api/admin/tokens", body, headers=bearer(ops["token"])
    )
    assert status == 403
    assert data["detail"] == "Permission denied: admin.users (needed for a token of user alice)"


async def test_a_token_follows_its_users_role_at_once(server: Server) -> None:
    await server.ok("POST", "/api/admin/teams", {"name": "ml"})
    alice = await make_user(server, "alice", "lead", ["ml"])
    resp = await server.client.get("/api/auth/whoami", headers=alice)
    me = await resp.json()
    assert (me["user"], me["role"], me["teams"]) == ("alice", "lead", ["ml"])
    assert me["permissions"] == ["queue.submit", "queue.approve", "usage.read"]
    await server.ok("POST", "/api/admin/users/alice/role", {"role": "viewer"})
    resp = await server.client.get("/api/auth/whoami", headers=alice)
    assert (await resp.json())["permissions"] == []
    resp = await server.client.post(
        "/api/queue/submit", json={"config_name": "tiny"}, headers=alice
    )
    assert resp.status == 403


async def test_a_disabled_users_tokens_stop_and_start_again_when_enabled(server: Server) -> None:
    alice = await make_user(server, "alice", "researcher", [])
    disabled = await server.ok("POST", "/api/admin/users/alice/disable")
    assert disabled["disabled"] is True
    resp = await server.client.get("/api/queue", headers=alice)
    assert resp.status == 401
    assert (await resp.json())["detail"] == (
        "API token of user alice, who is disabled; an admin can enable them "
        "(tunefleet users enable alice)"
    )
    failures = await server.audit(kind="auth.failed")
    assert failures[0]["detail"]["reason"] == "user alice is disabled"
    status, data = await _status(
        server, "POST", "/api/admin/tokens", {"name": "t", "user": "alice"}
    )
    assert (status, data["detail"].split(";")[0]) == (409, "user alice is disabled")
    await server.ok("POST", "/api/admin/users/alice/enable")
    resp = await server.client.get("/api/queue", headers=alice)
    assert resp.status == 200
    kinds = [e["kind"] for e in await server.audit()]
    assert "user.disabled" in kinds and "user.enabled" in kinds


async def test_user_administration_needs_admin_users(server: Server) -> None:
    people = await three_people(server)
    for method, path in (("GET", "/api/admin/users"), ("POST", "/api/admin/teams")):
        resp = await server.client.request(method, path, json={"name": "x"}, headers=people.bob)
        assert resp.status == 403
        assert (await resp.json())["detail"] == "Permission denied: admin.users"
