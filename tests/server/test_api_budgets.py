"""Teams' GPU-hour budgets: set by an admin, `warn` lets a submit through and says so
(answer, timeline, audit), `block` refuses it with the numbers and when it renews
(issue 24, item 6). The FakeClock starts at 2023-11-14 22:13:20 UTC, a Tuesday."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import Server
from tests.server.usage_testkit import MIDNIGHT, T, record_attempt
from tests.server.users_testkit import three_people


async def _post(server: Server, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    resp = await server.client.post(path, json=body, headers=headers)
    return resp.status, await resp.json()


async def test_an_admin_sets_shows_and_clears_a_budget(server: Server) -> None:
    await three_people(server)
    path = "/api/admin/teams/ml/budget"
    assert await server.ok("GET", path) == {"team": "ml", "budget": None}
    set_ = await server.ok("POST", path, {"gpu_hours": 10, "period": "week", "action": "block"})
    budget = set_["budget"]
    assert (budget["gpu_hours"], budget["period"], budget["action"]) == (10, "week", "block")
    assert budget["period_start"].startswith("2023-11-13T00:00:00")
    assert budget["renews_at"].startswith("2023-11-20T00:00:00")
    assert (budget["used_gpu_hours"], budget["spent"]) == (0, False)
    assert (await server.ok("GET", path))["budget"] == budget
    kinds = [e["kind"] for e in await server.audit()]
    assert "team.budget_set" in kinds
    assert await server.ok("DELETE", path) == {"team": "ml", "budget": None}
    assert "team.budget_cleared" in [e["kind"] for e in await server.audit()]
    resp = await server.client.delete(path, headers=server.admin)
    assert resp.status == 404 and "no budget" in (await resp.json())["detail"]


async def test_bad_budgets_are_refused_and_change_nothing(server: Server) -> None:
    people = await three_people(server)
    path = "/api/admin/teams/ml/budget"
    for body in (
        {"gpu_hours": 0},
        {"gpu_hours": -1},
        {"gpu_hours": 5, "period": "year"},
        {"gpu_hours": 5, "action": "shout"},
        {"gpu_hours": 5, "hours": 3},
    ):
        status, data = await _post(server, path, body, server.admin)
        assert status == 400, (body, data)
    status, data = await _post(
        server, "/api/admin/teams/nope/budget", {"gpu_hours": 1}, server.admin
    )
    assert status == 404 and "nope" in data["detail"]
    status, _ = await _post(server, path, {"gpu_hours": 1}, people.bob)  # a lead is no admin
    assert status == 403
    assert await server.ok("GET", path) == {"team": "ml", "budget": None}


async def test_a_spent_block_budget_refuses_a_submit_until_it_renews(server: Server) -> None:
    people = await three_people(server)
    await server.ok(
        "POST", "/api/admin/teams/ml/budget", {"gpu_hours": 1, "period": "day", "action": "block"}
    )
    await record_attempt(server, "j_a", "alice", "ml", 2, T - 1800, T, "failed")  # 1 GPU-hour
    before = (await server.ok("GET", "/api/queue"))["total"]
    status, data = await _post(
        server, "/api/queue/submit", {"config": {"model_type": "lora"}}, people.alice
    )
    assert status == 403
    assert data["detail"].startswith(
        "GPU-hour budget spent: team ml has used 1.00 of its 1 GPU-hour budget per day; it "
        "renews at 2023-11-15T00:00:00+00:00"
    )
    assert (await server.ok("GET", "/api/queue"))["total"] == before
    # Another team is not held back by ml's budget.
    status, _ = await _post(
        server, "/api/queue/submit", {"config": {"model_type": "lora"}}, people.carol
    )
    assert status == 200
    await server.clock.advance(MIDNIGHT - T)  # the day renews
    status, data = await _post(
        server, "/api/queue/submit", {"config": {"model_type": "lora"}}, people.alice
    )
    assert status == 200 and data.get("budget_warning") is None


async def test_a_spent_warn_budget_lets_the_job_through_and_says_so(server: Server) -> None:
    people = await three_people(server)
    await server.ok(
        "POST",
        "/api/admin/teams/ml/budget",
        {"gpu_hours": 0.5, "period": "month", "action": "warn"},
    )
    await record_attempt(
        server, "j_a", "bob", "ml", 1, T - 3600, None
    )  # running: 1 GPU-hour so far
    status, data = await _post(
        server, "/api/queue/submit", {"config": {"model_type": "lora"}}, people.alice
    )
    assert status == 200, data
    assert data["budget_warning"] == (
        "team ml has used 1.00 of its 0.5 GPU-hour budget per month; it renews at "
        "2023-12-01T00:00:00+00:00"
    )
    job = await server.job(data["job_id"])
    warned = [e for e in job["timeline"] if e["kind"] == "budget.warning"]
    assert [e["detail"]["message"] for e in warned] == [data["budget_warning"]]
    audited = [e for e in await server.audit() if e["kind"] == "budget.warning"]
    assert [e["target"] for e in audited] == [data["job_id"]]
    usage = await server.ok("GET", "/api/usage")
    assert [(b["team"], b["spent"], b["used_gpu_hours"]) for b in usage["budgets"]] == [
        ("ml", True, 1.0)
    ]
