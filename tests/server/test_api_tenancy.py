"""Every job belongs to a user and a team. Three users in two teams: alice (researcher)
and bob (lead) in ml, carol (researcher) in vision. A job, its logs, metrics, timeline,
position and artifacts are its user's, their team's and admins'; to anyone else it does
not exist (404, the same answer as for an id never used)."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import Server
from tests.server.protocol import EventStream
from tests.server.users_testkit import People, make_user, submit_as, three_people

JOB_PATHS = (
    ("GET", "/api/queue/{id}"),
    ("GET", "/api/queue/{id}/logs"),
    ("GET", "/api/queue/{id}/logs?follow=true"),
    ("GET", "/api/queue/{id}/metrics"),
    ("GET", "/api/queue/position/{id}"),
    ("GET", "/api/queue/{id}/artifacts"),
    ("GET", "/api/queue/{id}/artifacts/model.bin"),
    ("POST", "/api/queue/{id}/cancel"),
    ("DELETE", "/api/queue/{id}/artifacts"),
)


async def _call(server: Server, headers: dict[str, str], method: str, path: str) -> Any:
    body = {} if method == "POST" else None
    resp = await server.client.request(method, path, json=body, headers=headers)
    return resp.status, await resp.json()


async def _listed(server: Server, headers: dict[str, str], query: str = "") -> list[str]:
    resp = await server.client.get(f"/api/queue{query}", headers=headers)
    data = await resp.json()
    assert resp.status == 200, data
    assert data["total"] == len(data["jobs"])
    return sorted(job["job_id"] for job in data["jobs"])


async def test_a_job_records_its_user_and_team_and_shows_them(server: Server) -> None:
    people = await three_people(server)
    job_id = await submit_as(server, people.alice)
    job = await server.job(job_id)
    assert (job["user"], job["team"]) == ("alice", "ml")
    listed = await server.ok("GET", "/api/queue")
    assert (listed["jobs"][0]["user"], listed["jobs"][0]["team"]) == ("alice", "ml")
    mine = (await server.submit())["job_id"]
    assert ((await server.job(mine))["user"], (await server.job(mine))["team"]) == (
        "admin",
        "default",
    )


async def test_another_teams_job_is_not_found_anywhere(server: Server) -> None:
    people = await three_people(server)
    job_id = await submit_as(server, people.alice)
    for method, template in JOB_PATHS:
        path = template.replace("{id}", job_id)
        status, data = await _call(server, people.carol, method, path)
        assert (status, data) == (404, {"detail": f"Job not found: {job_id}"}), path
        # The very answer an id nobody used gets.
        never = template.replace("{id}", "j_0000000000000000")
        status, data = await _call(server, people.carol, method, never)
        assert (status, data) == (404, {"detail": "Job not found: j_0000000000000000"}), never
    assert (await server.job(job_id))["status"] == "pending"  # the refused cancel did nothing


async def test_the_user_their_team_and_admins_see_the_job(server: Server) -> None:
    people = await three_people(server)
    job_id = await submit_as(server, people.alice)
    for who in (people.alice, people.bob, server.admin):
        for method, template in JOB_PATHS[:5]:
            if "follow" in template:  # streams until the job ends
                continue
            status, data = await _call(server, who, method, template.replace("{id}", job_id))
            assert status == 200, (template, data)


async def test_lists_show_only_what_each_may_see_and_filter_by_user_and_team(
    server: Server,
) -> None:
    people = await three_people(server)
    a = await submit_as(server, people.alice)
    b = await submit_as(server, people.bob)
    c = await submit_as(server, people.carol)
    mine = (await server.submit())["job_id"]
    assert await _listed(server, people.alice) == sorted([a, b])
    assert await _listed(server, people.bob) == sorted([a, b])
    assert await _listed(server, people.carol) == [c]
    assert await _listed(server, server.admin) == sorted([a, b, c, mine])
    assert await _listed(server, server.admin, "?user=alice") == [a]
    assert await _listed(server, server.admin, "?team=ml") == sorted([a, b])
    assert await _listed(server, server.admin, "?team=ml&user=carol") == []
    assert await _listed(server, people.carol, "?user=alice") == []  # filters never widen
    resp = await server.client.get("/api/queue?user=ghost", headers=people.alice)
    assert resp.status == 404
    assert (await resp.json())["detail"].startswith("unknown user: ghost")
    resp = await server.client.get("/api/queue?team=nope", headers=people.alice)
    assert (await resp.json())["detail"].startswith("unknown team: nope")


async def test_cancel_researcher_own_lead_team_admin_any(server: Server) -> None:
    people = await three_people(server)
    by_alice = [await submit_as(server, people.alice) for _ in range(2)]
    by_bob = await submit_as(server, people.bob)
    by_carol = await submit_as(server, people.carol)
    status, data = await _call(server, people.alice, "POST", f"/api/queue/{by_bob}/cancel")
    assert status == 403 and data["detail"].startswith(f"Permission denied: job {by_bob} is bob")
    assert (await _call(server, people.alice, "POST", f"/api/queue/{by_alice[0]}/cancel"))[0] == 200
    # A lead cancels their team's jobs, but another team's is not even found.
    assert (await _call(server, people.bob, "POST", f"/api/queue/{by_alice[1]}/cancel"))[0] == 200
    status, _ = await _call(server, people.bob, "POST", f"/api/queue/{by_carol}/cancel")
    assert status == 404
    assert (await _call(server, server.admin, "POST", f"/api/queue/{by_carol}/cancel"))[0] == 200


async def test_submit_goes_to_the_default_team_or_one_of_the_users_own(server: Server) -> None:
    people = await three_people(server)
    await server.ok("POST", "/api/admin/teams/vision/members", {"user": "alice"})
    resp = await server.client.get("/api/auth/whoami", headers=people.alice)
    assert (await resp.json())["teams"] == ["ml", "vision"]
    job_id = await submit_as(server, people.alice, team="vision")
    assert (await server.job(job_id))["team"] == "vision"
    body = {"config_name": "tiny", "team": "default"}
    resp = await server.client.post("/api/queue/submit", json=body, headers=people.carol)
    assert resp.status == 403
    assert (await resp.json())["detail"] == (
        "Permission denied: user carol is not in team default; submit to one of yours "
        "(vision) or ask an admin to add you"
    )
    body["team"] = "nope"
    resp = await server.client.post("/api/queue/submit", json=body, headers=people.carol)
    assert resp.status == 404
    assert (await resp.json())["detail"] == "unknown team: nope; your teams: vision"
    # An admin may submit for any team.
    assert (await server.job((await server.submit(team="vision"))["job_id"]))["team"] == "vision"
    assert len(await _listed(server, server.admin)) == 2  # the refusals queued nothing


async def test_a_user_in_no_team_cannot_submit(server: Server) -> None:
    loner = await make_user(server, "loner", "researcher", [])
    resp = await server.client.post(
        "/api/queue/submit", json={"config_name": "tiny"}, headers=loner
    )
    assert resp.status == 403
    assert (await resp.json())["detail"] == (
        "user loner belongs to no team, and a job needs one; ask an admin to add them "
        "(tunefleet teams add-member TEAM loner)"
    )


async def test_the_event_feed_carries_only_the_jobs_its_reader_may_see(server: Server) -> None:
    people: People = await three_people(server)
    resp = await server.client.get("/api/events?kinds=job", headers=people.carol)
    feed = EventStream(resp)
    await feed.expect("hello")
    await submit_as(server, people.alice)  # another team's: never on carol's feed
    own = await submit_as(server, people.carol)
    job = await feed.expect("job")
    assert job.data["job_id"] == own
    feed.close()


async def test_the_event_feed_keeps_its_answer_for_a_job_it_has_seen(server: Server) -> None:
    """A job's second event is decided by the answer kept from its first (no lookup):
    another's job stays off the feed, one's own stays on it."""
    people: People = await three_people(server)
    resp = await server.client.get("/api/events?kinds=job", headers=people.carol)
    feed = EventStream(resp)
    await feed.expect("hello")
    theirs = await submit_as(server, people.alice)
    own = await submit_as(server, people.carol)
    for job_id, headers in ((theirs, people.alice), (own, people.carol)):
        cancel = await server.client.post(f"/api/queue/{job_id}/cancel", headers=headers)
        assert cancel.status == 200, await cancel.text()
    seen = [
        (event.data["job_id"], event.data["status"])
        for event in (await feed.expect("job"), await feed.expect("job"))
    ]
    assert seen == [(own, "pending"), (own, "cancelled")]
    feed.close()
