"""GET /api/usage: GPU-seconds per user or team per UTC day, derived from attempts, in JSON
and CSV; who sees whose (issue 24, item 6). alice (researcher) and bob (lead) are in ml,
carol (researcher) in vision."""

from __future__ import annotations

import csv
import io
from typing import Any

from tests.server.conftest import Server
from tests.server.usage_testkit import MIDNIGHT, T, record_attempt
from tests.server.users_testkit import People, three_people


async def _history(server: Server) -> People:
    people = await three_people(server)
    await record_attempt(server, "j_a", "alice", "ml", 2, T - 3600, T - 1800)  # failed: 3600
    await record_attempt(server, "j_a", "alice", "ml", 2, T - 600, MIDNIGHT + 600, "succeeded")
    await record_attempt(server, "j_b", "bob", "ml", 1, MIDNIGHT + 100, None)  # still running
    await record_attempt(server, "j_c", "carol", "vision", 4, T - 100, T, "preempted")
    return people


async def _usage(server: Server, headers: dict[str, str], query: str) -> tuple[int, Any]:
    resp = await server.client.get(f"/api/usage?{query}", headers=headers)
    return resp.status, await resp.json()


async def test_usage_is_the_sum_of_the_attempts_gpu_seconds(server: Server) -> None:
    await _history(server)
    await server.clock.advance(MIDNIGHT + 1000 - T)  # now: 1000 s into the 15th
    data = await server.ok("GET", "/api/usage?by=team&since=2023-11-14&until=2023-11-16")
    rows = {(r["day"], r["name"]): r["gpu_seconds"] for r in data["rows"]}
    before = MIDNIGHT - (T - 600)  # j_a's second attempt, before midnight
    assert rows == {
        ("2023-11-14", "ml"): 2 * 1800 + 2 * before,
        ("2023-11-15", "ml"): 2 * 600 + 1 * 900,
        ("2023-11-14", "vision"): 4 * 100,
    }
    attempts = []
    for job_id in ("j_a", "j_b", "j_c"):
        attempts += (await server.job(job_id))["attempt_history"]
    assert data["total_gpu_seconds"] == sum(a["gpu_seconds"] for a in attempts)
    assert {t["name"]: t["gpu_seconds"] for t in data["totals"]} == {
        "ml": 2 * 1800 + 2 * before + 2 * 600 + 900,
        "vision": 400,
    }
    by_user = await server.ok("GET", "/api/usage?by=user&since=2023-11-14&until=2023-11-16")
    assert by_user["total_gpu_seconds"] == data["total_gpu_seconds"]
    assert {t["name"] for t in by_user["totals"]} == {"alice", "bob", "carol"}


async def test_the_window_clips_attempts_and_defaults_to_thirty_days_to_now(
    server: Server,
) -> None:
    await _history(server)
    await server.clock.advance(MIDNIGHT + 1000 - T)
    data = await server.ok("GET", "/api/usage?by=team&since=2023-11-15T00:00:00Z")
    assert data["until"].startswith("2023-11-15T00:16:40")
    assert data["total_gpu_seconds"] == 2 * 600 + 900
    default = await server.ok("GET", "/api/usage")
    assert default["by"] == "team" and default["since"].startswith("2023-10-16")


async def test_each_sees_their_own_a_lead_their_teams_an_admin_all(server: Server) -> None:
    people = await _history(server)
    await server.clock.advance(MIDNIGHT + 1000 - T)

    async def names(headers: dict[str, str]) -> set[str]:
        status, data = await _usage(server, headers, "by=user&since=2023-11-14")
        assert status == 200, data
        return {t["name"] for t in data["totals"]}

    assert await names(people.alice) == {"alice"}
    assert await names(people.carol) == {"carol"}
    assert await names(people.bob) == {"alice", "bob"}
    assert await names(server.admin) == {"alice", "bob", "carol"}
    # A filter narrows, never widens.
    status, data = await _usage(server, people.alice, "by=user&since=2023-11-14&team=vision")
    assert (status, data["rows"]) == (200, [])
    status, data = await _usage(server, people.bob, "by=user&since=2023-11-14&user=alice")
    assert {t["name"] for t in data["totals"]} == {"alice"}


async def test_usage_as_csv_by_format_or_accept_escapes_formula_cells(server: Server) -> None:
    await three_people(server)
    await record_attempt(server, "j_x", "=evil()", "ml", 1, T - 60, T)
    for query, headers in (
        ("by=user&since=2023-11-14&format=csv", server.admin),
        ("by=user&since=2023-11-14", {**server.admin, "Accept": "text/csv"}),
    ):
        resp = await server.client.get(f"/api/usage?{query}", headers=headers)
        assert resp.status == 200
        assert resp.content_type == "text/csv"
        assert "attachment" in resp.headers["Content-Disposition"]
        lines = list(csv.reader(io.StringIO(await resp.text())))
        assert lines == [
            ["day", "user", "gpu_seconds", "gpu_hours", "attempts"],
            ["2023-11-14", "'=evil()", "60.0", "0.016667", "1"],
        ]


async def test_bad_usage_queries_are_refused_with_what_to_do(server: Server) -> None:
    await three_people(server)
    cases = {
        "by=project": 400,
        "since=yesterday": 400,
        "since=2023-11-15&until=2023-11-14": 400,
        "since=2022-01-01&until=2023-11-14": 400,
        "team=nope": 404,
        "user=nobody": 404,
    }
    for query, status in cases.items():
        got, data = await _usage(server, server.admin, query)
        assert got == status, (query, data)
        assert isinstance(data["detail"], str) and "\n" not in data["detail"]
    _, data = await _usage(server, server.admin, "since=2023-11-15&until=2023-11-14")
    assert "must be before until" in data["detail"]
    _, data = await _usage(server, server.admin, "since=2022-01-01&until=2023-11-14")
    assert "shorter" in data["detail"]


async def test_a_running_attempt_counts_up_to_now_in_the_jobs_attempts(server: Server) -> None:
    worker = await server.connected_worker()
    job_id = await server.running_job(worker, gpu_count=1)
    first = (await server.job(job_id))["attempt_history"][0]["gpu_seconds"]
    await server.clock.advance(120)
    later = (await server.job(job_id))["attempt_history"][0]["gpu_seconds"]
    assert later == first + 120
