"""Concurrency limits over HTTP (issue 24): GET/POST /api/queue/concurrency, a team's
limits, /api/queue/me and the stats' by_user and by_team. A job a limit holds stays
pending with a reason naming the limit and its numbers; lowering a limit stops nothing."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import Server
from tests.server.protocol import eventually
from tests.server.users_testkit import submit_as, three_people


async def _post(server: Server, path: str, body: Any, headers: dict[str, str] | None = None):
    resp = await server.post(path, body, headers)
    return resp.status, await resp.json()


async def test_limits_start_unlimited_and_are_set_in_simpletuners_spelling(server: Server) -> None:
    assert await server.ok("GET", "/api/queue/concurrency") == {
        "max_concurrent": None,
        "user_max_concurrent": None,
        "teams": {},
    }
    both = {"max_concurrent": 10, "user_max_concurrent": 3}
    assert (await server.ok("POST", "/api/queue/concurrency", both))["max_concurrent"] == 10
    # A field left out keeps its value; 0 is unlimited, as null is.
    kept = await server.ok("POST", "/api/queue/concurrency", {"max_concurrent": 0})
    assert (kept["max_concurrent"], kept["user_max_concurrent"]) == (None, 3)
    stats = await server.ok("GET", "/api/queue/stats")
    assert (stats["max_concurrent"], stats["user_max_concurrent"]) == (None, 3)
    assert "queue_depth" in stats and "workers" in stats  # the existing fields stay


async def test_bad_limits_are_refused_and_change_nothing(server: Server) -> None:
    await server.ok("POST", "/api/queue/concurrency", {"max_concurrent": 4})
    for body in ({"max_concurrent": -1}, {"user_max_concurrent": "lots"}, {"max_concurent": 2}):
        status, data = await _post(server, "/api/queue/concurrency", body)
        assert status == 400, data
        assert isinstance(data["detail"], str) and "\n" not in data["detail"]
    assert (await server.ok("GET", "/api/queue/concurrency"))["max_concurrent"] == 4


async def test_only_queue_admins_change_the_fleets_limits(server: Server) -> None:
    people = await three_people(server)
    status, _ = await _post(server, "/api/queue/concurrency", {"max_concurrent": 1}, people.bob)
    assert status == 403
    resp = await server.get("/api/queue/concurrency", people.alice)
    assert resp.status == 200 and (await resp.json())["max_concurrent"] is None


async def test_team_limits_are_set_by_user_admins_and_warned_above_the_fleet(
    server: Server,
) -> None:
    people = await three_people(server)
    path = "/api/admin/teams/ml/limits"
    data = await server.ok("POST", path, {"max_jobs": 2, "max_gpus": 64})
    assert (data["team"], data["max_jobs"], data["max_gpus"]) == ("ml", 2, 64)
    assert "64 GPUs" in data["warning"]  # no worker yet: accepted, and said
    kept = await server.ok("POST", path, {"max_gpus": 0})
    assert (kept["max_jobs"], kept["max_gpus"], kept["warning"]) == (2, None, None)
    shown = await server.ok("GET", "/api/queue/concurrency")
    assert shown["teams"] == {"ml": {"max_jobs": 2, "max_gpus": None}}
    status, data = await _post(server, "/api/admin/teams/ghost/limits", {"max_jobs": 1})
    assert status == 404 and "ghost" in data["detail"]
    status, _ = await _post(server, path, {"max_jobs": -2})
    assert status == 400
    status, _ = await _post(server, path, {"max_jobs": 1}, people.bob)
    assert status == 403
    assert (await server.ok("GET", "/api/queue/concurrency"))["teams"]["ml"]["max_jobs"] == 2


async def _state(server: Server, job_id: str) -> str:
    return str((await server.job(job_id))["status"])


async def test_a_held_job_waits_naming_the_limit_and_lowering_stops_nothing(
    server: Server,
) -> None:
    people = await three_people(server)
    await server.ok("POST", "/api/queue/concurrency", {"user_max_concurrent": 1})
    await server.connected_worker("w-1")
    await server.connected_worker("w-2")
    first = await submit_as(server, people.alice)
    await eventually(
        lambda: _check_state(server, first, "dispatched"), "alice's first job dispatched"
    )
    second = await submit_as(server, people.alice)
    held = await server.job(second)
    assert held["status"] == "pending"
    assert held["wait_reason"] == "user alice runs 1 of their 1 jobs (user_max_concurrent)"
    # Another user is not held by alice's limit: carol's job takes the other worker.
    other = await submit_as(server, people.carol)
    await eventually(lambda: _check_state(server, other, "dispatched"), "carol's job dispatched")

    me = await server.client.get("/api/queue/me", headers=people.alice)
    mine = await me.json()
    assert (mine["pending_count"], mine["running_count"], mine["blocked_count"]) == (1, 1, 0)
    assert mine["best_position"] == 1
    assert [j["job_id"] for j in mine["pending_jobs"]] == [second]
    assert [j["job_id"] for j in mine["running_jobs"]] == [first]
    assert mine["awaiting_approval"] == []

    stats = await (await server.get("/api/queue/stats", people.alice)).json()
    assert stats["by_user"] == {"alice": {"pending": 1, "running": 1, "gpus": 0}}
    assert set(stats["by_team"]) == {"ml"}
    everyone = await server.ok("GET", "/api/queue/stats")
    assert set(everyone["by_user"]) == {"alice", "carol"}

    # Lowered below what runs: nothing running is stopped, the held job still waits.
    await server.ok("POST", "/api/queue/concurrency", {"max_concurrent": 1})
    assert await _state(server, first) == "dispatched"
    assert await _state(server, other) == "dispatched"
    reason = (await server.job(second))["wait_reason"]
    assert reason == "the fleet runs 2 of its 1 jobs (max_concurrent)"


async def _check_state(server: Server, job_id: str, state: str) -> bool:
    return await _state(server, job_id) == state


async def test_raising_a_limit_starts_the_held_job(server: Server) -> None:
    people = await three_people(server)
    await server.ok("POST", "/api/admin/teams/ml/limits", {"max_jobs": 1})
    await server.connected_worker("w-1")
    await server.connected_worker("w-2")
    first = await submit_as(server, people.alice)
    await eventually(lambda: _check_state(server, first, "dispatched"), "first job dispatched")
    second = await submit_as(server, people.bob)
    assert (await server.job(second))["wait_reason"] == "team ml runs 1 of its 1 jobs"
    await server.ok("POST", "/api/admin/teams/ml/limits", {"max_jobs": 2})
    await eventually(lambda: _check_state(server, second, "dispatched"), "held job started")


async def test_me_without_jobs_is_empty(server: Server) -> None:
    mine = await server.ok("GET", "/api/queue/me")
    assert mine["best_position"] is None
    assert mine["pending_jobs"] == mine["running_jobs"] == mine["awaiting_approval"] == []
