"""Approval over HTTP: admins define rules; a matching submit waits in pending_approval
with a wait reason naming its team and rule; a lead of its team or an admin approves or
rejects it; a lead of another team is refused with whose team it is. alice (researcher)
and bob (lead) in ml, carol (researcher) in vision, dave (lead) in vision."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import Server
from tests.server.users_testkit import People, make_user, submit_as, three_people

RULES = "/api/admin/approval-rules"


async def _post(server: Server, headers: dict[str, str], path: str, body: Any = None) -> Any:
    resp = await server.client.post(path, json=body if body is not None else {}, headers=headers)
    return resp.status, await resp.json()


async def _with_gpu_rule(server: Server) -> tuple[People, dict[str, str]]:
    people = await three_people(server)
    dave = await make_user(server, "dave", "lead", ["vision"])
    rule = {"condition": "gpus_exceed", "threshold": "4", "exempt_roles": ["admin"]}
    await server.ok("POST", RULES, rule)
    return people, dave


async def test_rules_are_added_listed_in_order_and_deleted(server: Server) -> None:
    first = await server.ok("POST", RULES, {"condition": "gpus_exceed", "threshold": "4"})
    second = await server.ok("POST", RULES, {"condition": "hardware_type", "threshold": "a100*"})
    assert first["description"] == "more than 4 GPUs"
    listed = await server.ok("GET", RULES)
    assert [r["id"] for r in listed["rules"]] == [first["id"], second["id"]]
    await server.ok("DELETE", f"{RULES}/{first['id']}")
    assert [r["id"] for r in (await server.ok("GET", RULES))["rules"]] == [second["id"]]
    resp = await server.client.delete(f"{RULES}/{first['id']}", headers=server.admin)
    assert resp.status == 404
    assert (await resp.json())["detail"].startswith(f"approval rule not found: {first['id']}")
    for odd in ("%C2%B2", "99999999999999999999", "x"):  # '²' counts as a digit to str
        resp = await server.client.delete(f"{RULES}/{odd}", headers=server.admin)
        assert resp.status == 404, odd


async def test_a_bad_rule_is_refused_and_nothing_is_stored(server: Server) -> None:
    for body, status in (
        ({"condition": "gpus_exceed", "threshold": "four"}, 400),
        ({"condition": "hardware_type"}, 400),
        ({"condition": "cost_exceeds", "threshold": "50"}, 400),
    ):
        resp = await server.client.post(RULES, json=body, headers=server.admin)
        assert resp.status == status, body
        assert "detail" in await resp.json()
    assert (await server.ok("GET", RULES))["rules"] == []


async def test_only_admins_manage_rules(server: Server) -> None:
    people = await three_people(server)
    resp = await server.client.get(RULES, headers=people.bob)
    assert resp.status == 403


async def test_a_matching_submit_waits_with_its_reason_and_an_exempt_role_does_not(
    server: Server,
) -> None:
    people, _ = await _with_gpu_rule(server)
    job_id = await submit_as(server, people.alice, gpu_count=8)
    job = await server.job(job_id)
    assert job["status"] == "pending_approval"
    assert job["wait_reason"] == "awaiting approval by a lead of team ml (rule: more than 4 GPUs)"
    position = await server.ok("GET", f"/api/queue/position/{job_id}")
    assert (position["position"], position["reason"]) == (None, job["wait_reason"])
    stats = await server.ok("GET", "/api/queue/stats")
    assert (stats["pending_approval"], stats["queue_depth"]) == (1, 0), "held is not queued"
    small = await submit_as(server, people.alice, gpu_count=2)
    assert (await server.job(small))["status"] == "pending"
    mine = (await server.submit(gpu_count=8))["job_id"]
    assert (await server.job(mine))["status"] == "pending", "admins are exempt"


async def test_a_lead_of_the_team_approves_and_the_job_queues(server: Server) -> None:
    people, _ = await _with_gpu_rule(server)
    job_id = await submit_as(server, people.alice, gpu_count=8)
    listed = await server.client.get("/api/queue/approvals", headers=people.bob)
    [waiting] = (await listed.json())["jobs"]
    assert waiting["job_id"] == job_id
    assert waiting["wait_reason"].endswith("(rule: more than 4 GPUs)")
    status, data = await _post(server, people.bob, f"/api/queue/{job_id}/approve")
    assert (status, data["status"]) == (200, "pending")
    assert (await server.job(job_id))["status"] == "pending"
    [event] = await server.audit(kind="job.approved")
    assert (event["target"], "bob" in event["actor"]) == (job_id, True)


async def test_a_reject_ends_the_job_cancelled_with_the_reason(server: Server) -> None:
    people, _ = await _with_gpu_rule(server)
    job_id = await submit_as(server, people.alice, gpu_count=8)
    status, data = await _post(
        server, server.admin, f"/api/queue/{job_id}/reject", {"reason": "use 4 GPUs"}
    )
    assert (status, data["status"]) == (200, "cancelled")
    job = await server.job(job_id)
    assert job["status"] == "cancelled"
    assert job["error"].startswith("rejected by ") and job["error"].endswith(": use 4 GPUs")
    [event] = await server.audit(kind="job.rejected")
    assert event["target"] == job_id


async def test_a_lead_of_another_team_is_told_whose_team_it_is(server: Server) -> None:
    people, dave = await _with_gpu_rule(server)
    job_id = await submit_as(server, people.alice, gpu_count=8)
    listed = await server.client.get("/api/queue/approvals", headers=dave)
    assert (await listed.json())["jobs"] == []
    for action in ("approve", "reject"):
        status, data = await _post(server, dave, f"/api/queue/{job_id}/{action}")
        assert status == 403
        assert data["detail"].startswith(f"Permission denied: job {job_id} is team ml's")
    assert (await server.job(job_id))["status"] == "pending_approval"


async def test_a_researcher_may_not_decide(server: Server) -> None:
    people, _ = await _with_gpu_rule(server)
    job_id = await submit_as(server, people.alice, gpu_count=8)
    status, _ = await _post(server, people.alice, f"/api/queue/{job_id}/approve")
    assert status == 403
    assert (await server.job(job_id))["status"] == "pending_approval"


async def test_unknown_and_undecidable_jobs(server: Server) -> None:
    queued = (await server.submit())["job_id"]
    status, data = await _post(server, server.admin, "/api/queue/j_0000000000000000/approve")
    assert (status, data) == (404, {"detail": "Job not found: j_0000000000000000"})
    status, data = await _post(server, server.admin, f"/api/queue/{queued}/approve")
    assert status == 409
    assert data["detail"] == f"job {queued} is pending, not awaiting approval; nothing to decide"
    assert (await server.job(queued))["status"] == "pending"
