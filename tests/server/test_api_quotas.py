"""Team GPU quotas over HTTP (issue 25): POST/DELETE /api/admin/teams/{name}/quota, the
fair_share part of /api/queue/stats, and a reclaim of borrowed GPUs decided by a pass
and handed to the preempter (a fake here: the real stop is Fleet.preempt)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.server.conftest import Server
from tests.server.protocol import WorkerClient, eventually
from tests.server.users_testkit import submit_as, three_people
from tunefleet.http import keys

A100 = {"name": "NVIDIA A100-SXM4-80GB", "vram_gb": 80, "count": 2, "accelerator": "cuda"}


async def _post(server: Server, path: str, body: Any, headers: dict[str, str] | None = None):
    resp = await server.post(path, body, headers)
    return resp.status, await resp.json()


async def test_a_quota_is_set_kept_cleared_and_audited(server: Server) -> None:
    await three_people(server)
    path = "/api/admin/teams/ml/quota"
    data = await server.ok("POST", path, {"gpus": 4, "weight": 2, "borrow_limit": 2})
    assert data["team"] == "ml"
    assert data["quota"] == {"gpus": 4, "flavors": {}, "weight": 2.0, "borrow_limit": 2}
    # No worker yet: the quota is above the fleet (oversubscribed), accepted and said.
    assert any("oversubscribed" in w for w in data["warnings"])
    # A field left out keeps its value.
    kept = await server.ok("POST", path, {"flavors": {"*H100*": 2}})
    assert kept["quota"] == {"gpus": 4, "flavors": {"*H100*": 2}, "weight": 2.0, "borrow_limit": 2}
    assert any("'*H100*' matches no worker" in w for w in kept["warnings"])
    stats = await server.ok("GET", "/api/queue/stats")
    assert stats["fair_share"]["ml"]["quota"]["gpus"] == 4
    assert stats["fair_share"]["ml"]["used_gpus"] == 0
    cleared = await server.ok("DELETE", path)
    assert cleared["quota"] == {"gpus": None, "flavors": {}, "weight": 1.0, "borrow_limit": None}
    assert "ml" not in (await server.ok("GET", "/api/queue/stats"))["fair_share"]
    kinds = [e["kind"] for e in await server.audit()]
    assert kinds.count("team.quota_set") == 2 and kinds.count("team.quota_cleared") == 1


async def test_a_flavor_some_worker_matches_gives_no_warning(server: Server) -> None:
    await three_people(server)
    await server.connected_worker("w-1", gpu_info=A100)
    data = await server.ok("POST", "/api/admin/teams/ml/quota", {"flavors": {"*a100*": 2}})
    assert data["warnings"] == []


async def test_bad_quotas_are_refused_and_change_nothing(server: Server) -> None:
    people = await three_people(server)
    path = "/api/admin/teams/ml/quota"
    await server.ok("POST", path, {"gpus": 2})
    for body in (
        {"weight": 0},
        {"weight": -1},
        {"gpus": -1},
        {"borrow_limit": -3},
        {"flavors": {"*A100*": -1}},
        {"flavors": {" ": 2}},
        {"flavors": ["*A100*"]},
        {"gpu": 2},
    ):
        status, data = await _post(server, path, body)
        assert status == 400, (body, data)
        assert isinstance(data["detail"], str) and "\n" not in data["detail"]
    status, data = await _post(server, "/api/admin/teams/ghost/quota", {"gpus": 1})
    assert status == 404 and "ghost" in data["detail"]
    resp = await server.delete("/api/admin/teams/ghost/quota")
    assert resp.status == 404
    status, _ = await _post(server, path, {"gpus": 8}, people.bob)
    assert status == 403
    resp = await server.delete(path, people.bob)
    assert resp.status == 403
    quota = (await server.ok("GET", "/api/queue/stats"))["fair_share"]["ml"]["quota"]
    assert quota == {"gpus": 2, "flavors": {}, "weight": 1.0, "borrow_limit": None}


async def _dispatched(server: Server, job_id: str) -> bool:
    return (await server.job(job_id))["status"] == "dispatched"


async def test_a_team_below_its_quota_reclaims_a_borrowed_worker(make_server: Any) -> None:
    """ml borrows vision's worker; vision submits: the pass chooses ml's borrowing job,
    hands it to the preempter, audits and counts it; once that worker is free, vision's
    job (within its quota) goes before ml's (borrowing)."""
    server: Server = await make_server(min_runtime_before_preempt=0)
    people = await three_people(server)
    told: list[tuple[str, str]] = []

    async def preempt(job_id: str, reason: str) -> None:
        told.append((job_id, reason))

    server.app[keys.FLEET].set_preempter(preempt)
    await server.ok("POST", "/api/admin/teams/ml/quota", {"gpus": 2})
    await server.ok("POST", "/api/admin/teams/vision/quota", {"gpus": 2})
    workers: dict[str, WorkerClient] = {}
    for name in ("w-1", "w-2"):
        workers[name] = await server.connected_worker(name, gpu_info=A100)
    by_id = {w.worker_id: w for w in workers.values()}
    first = await submit_as(server, people.alice, gpu_count=2, target="worker")
    await eventually(lambda: _dispatched(server, first), "ml's first job dispatched")
    await server.clock.advance(10)
    second = await submit_as(server, people.alice, gpu_count=2, target="worker")
    await eventually(lambda: _dispatched(server, second), "ml's second job borrows")
    stats = await server.ok("GET", "/api/queue/stats")
    assert (stats["fair_share"]["ml"]["used_gpus"], stats["fair_share"]["ml"]["borrowed_gpus"]) == (
        4,
        2,
    )

    theirs = await submit_as(server, people.carol, gpu_count=2, target="worker")

    async def reclaimed() -> bool:
        return bool(told)

    await eventually(reclaimed, "a reclaim decided")
    assert [job for job, _ in told] == [second]  # the borrowing job, not the one in quota
    assert "team ml borrows worker" in told[0][1]
    await server.settle()
    await server.ok("POST", "/api/queue/concurrency", {})  # another pass: not chosen twice
    await server.settle()
    assert len(told) == 1
    entries = [e for e in await server.audit() if e["kind"] == "queue.reclaim"]
    assert len(entries) == 1 and entries[0]["target"] == second
    metrics = await (await server.get("/metrics")).text()
    assert 'tunefleet_reclaims_total{team="ml"} 1.0' in metrics
    stats = await server.ok("GET", "/api/queue/stats")
    assert stats["fair_share"]["ml"]["preemptions"] == 1

    # The stop itself is the preempter's (h-preempt); here the victim's worker ends it.
    victim_worker = by_id[(await server.job(second))["worker_id"]]
    await victim_worker.report(second, "failed", error="preempted")
    await eventually(lambda: _dispatched(server, theirs), "vision's job takes the worker")
    assert (await server.job(theirs))["worker_id"] == victim_worker.worker_id


async def test_a_young_borrower_is_reclaimed_once_its_protection_ends(server: Server) -> None:
    """Default --min-runtime-before-preempt (600 s): nothing is preempted before; the
    orchestrator looks again when the window ends, with no other event needed. A team at
    its quota that may not borrow waits naming its quota."""
    people = await three_people(server)
    told: list[str] = []
    server.app[keys.FLEET].set_preempter(lambda job_id, reason: told.append(job_id))
    await server.ok("POST", "/api/admin/teams/ml/quota", {"gpus": 0})
    await server.ok("POST", "/api/admin/teams/vision/quota", {"gpus": 2, "borrow_limit": 0})
    worker = await server.connected_worker("w-1", gpu_info=A100)
    borrower = await submit_as(server, people.alice, gpu_count=2, target="worker")
    assert (await worker.take_job())["job_id"] == borrower
    await worker.report(borrower, "running")  # acknowledged: it stays on the worker
    theirs = await submit_as(server, people.carol, gpu_count=2, target="worker")

    async def wait(seconds: int) -> None:  # heartbeats on, so the worker stays online
        for _ in range(seconds // 50):
            await server.clock.advance(50)
            await worker.heartbeat(status="busy", current_job_id=borrower)
        await server.clock.advance(seconds % 50)

    await wait(300)
    assert told == []  # ml's job has run 300 of its protected 600 s
    await wait(301)

    async def reclaimed() -> bool:
        return told == [borrower]

    await eventually(reclaimed, "the borrower chosen once its protection ended")
    assert (await server.job(theirs))["status"] == "pending"
    # vision's second job: its team may not borrow, and would be past its quota.
    await server.ok("POST", "/api/admin/teams/vision/quota", {"gpus": 0})
    reason = (await server.job(theirs))["wait_reason"]
    assert reason == "team vision uses 0 of its 0 GPUs (quota) and may not borrow"


async def _run_for_100_s(server: Server, headers: dict[str, str]) -> None:
    worker = await server.connected_worker("w-1", gpu_info=A100)
    job = await submit_as(server, headers, gpu_count=2, target="worker")
    assert (await worker.take_job())["job_id"] == job
    await worker.report(job, "running")
    await server.clock.advance(50)
    await worker.heartbeat(status="busy", current_job_id=job)
    await server.clock.advance(50)
    await worker.report(job, "completed")
    await server.wait_job(job, "completed")


async def test_standing_counts_what_ran_before_the_first_quota(server: Server) -> None:
    """Fair share switched on reads the stored attempts: a team's GPU time from before
    any quota counts (nothing was counted while fair share was off)."""
    people = await three_people(server)
    await _run_for_100_s(server, people.alice)
    assert (await server.ok("GET", "/api/queue/stats"))["fair_share"] == {}
    await server.ok("POST", "/api/admin/teams/vision/quota", {"gpus": 2})
    shares = (await server.ok("GET", "/api/queue/stats"))["fair_share"]
    assert shares["ml"]["standing"] == pytest.approx(200, abs=0.5)  # no quota, weight 1
    assert shares["vision"]["standing"] == 0


async def test_standing_is_rebuilt_from_the_stored_attempts_at_start(make_server: Any) -> None:
    """No counter of its own: a restarted orchestrator reads the attempts and finds the
    same decayed GPU-seconds (2 GPUs x 100 s; a week's half-life barely decays it)."""
    first: Server = await make_server()
    people = await three_people(first)
    await first.ok("POST", "/api/admin/teams/ml/quota", {"gpus": 2})
    worker = await first.connected_worker("w-1", gpu_info=A100)
    job = await submit_as(first, people.alice, gpu_count=2, target="worker")
    assert (await worker.take_job())["job_id"] == job
    await worker.report(job, "running")
    await first.clock.advance(50)
    await worker.heartbeat(status="busy", current_job_id=job)
    await first.clock.advance(50)
    await worker.report(job, "completed")
    await first.wait_job(job, "completed")
    before = (await first.ok("GET", "/api/queue/stats"))["fair_share"]["ml"]["standing"]
    assert 199 < before <= 200.5
    await first.client.close()
    second: Server = await make_server()
    after = (await second.ok("GET", "/api/queue/stats"))["fair_share"]["ml"]
    assert after["standing"] == pytest.approx(before, abs=0.5)
    assert after["used_gpus"] == 0


@pytest.mark.parametrize("flag", [False, True])
async def test_priority_preemption_within_a_team_is_off_unless_asked(
    make_server: Any, flag: bool
) -> None:
    """--priority-preemption: a team's higher-priority job may preempt its own team's
    lower-priority job; never another team's, and nothing without the flag."""
    server: Server = await make_server(priority_preemption=flag, min_runtime_before_preempt=0)
    people = await three_people(server)
    told: list[str] = []
    server.app[keys.FLEET].set_preempter(lambda job_id, reason: told.append(job_id))
    worker = await server.connected_worker("w-1", gpu_info=A100)
    low = await submit_as(server, people.alice, gpu_count=2, target="worker", priority=-5)
    assert (await worker.take_job())["job_id"] == low
    await worker.report(low, "running")
    await submit_as(server, people.carol, gpu_count=2, target="worker", priority=50)
    await server.settle()
    assert told == []  # carol is in vision: never another team's job
    await submit_as(server, people.bob, gpu_count=2, target="worker", priority=10)
    await server.settle()
    assert told == ([low] if flag else [])


async def test_a_failing_preempter_leaves_the_scheduler_working(make_server: Any) -> None:
    server: Server = await make_server(min_runtime_before_preempt=0)
    people = await three_people(server)
    told: list[str] = []

    async def broken(job_id: str, reason: str) -> None:
        told.append(job_id)
        raise RuntimeError("the job actor is gone")

    server.app[keys.FLEET].set_preempter(broken)
    await server.ok("POST", "/api/admin/teams/ml/quota", {"gpus": 0})
    await server.ok("POST", "/api/admin/teams/vision/quota", {"gpus": 2})
    worker = await server.connected_worker("w-1", gpu_info=A100)
    borrower = await submit_as(server, people.alice, gpu_count=2, target="worker")
    assert (await worker.take_job())["job_id"] == borrower
    await submit_as(server, people.carol, gpu_count=2, target="worker")

    async def tried() -> bool:
        return told == [borrower]

    await eventually(tried, "the preempter tried")
    assert [e["target"] for e in await server.audit(kind="queue.reclaim")] == [borrower]
    stats = await server.ok("GET", "/api/queue/stats")  # the scheduler still answers
    assert stats["fair_share"]["ml"]["preemptions"] == 1


async def test_a_reclaim_preempts_its_victim_and_the_reclaiming_team_runs(
    make_server: Any,
) -> None:
    """The real preempter (Fleet.preempt): the borrowing victim gets a job_cancel with
    preempt, its agent (as SimpleTuner's) stops and reports cancelled, the attempt ends
    preempted with no retry spent, and the freed worker goes to the team that reclaimed
    it; the victim waits behind it (it would borrow)."""
    server: Server = await make_server(min_runtime_before_preempt=0)
    people = await three_people(server)
    await server.ok("POST", "/api/admin/teams/ml/quota", {"gpus": 0})
    await server.ok("POST", "/api/admin/teams/vision/quota", {"gpus": 2})
    worker = await server.connected_worker("w-1", gpu_info=A100)
    victim = await submit_as(server, people.alice, gpu_count=2, target="worker", max_retries=0)
    assert (await worker.take_job())["job_id"] == victim
    await worker.report(victim, "running")
    theirs = await submit_as(server, people.carol, gpu_count=2, target="worker")

    cancel = await worker.stream.expect("job_cancel")
    assert (cancel.data["job_id"], cancel.data["preempt"]) == (victim, True)
    assert "team ml borrows worker" in cancel.data["reason"]
    assert (await worker.report(victim, "cancelled")).status == 200
    submitted = await worker.stream.expect("job_submit")
    assert submitted.data["job_id"] == theirs
    job = await server.job(victim)
    assert (job["status"], job["preempted"]) == ("pending", 1)
    assert job["attempt_history"][0]["outcome"] == "preempted"
    metrics = await (await server.get("/metrics")).text()
    assert 'tunefleet_reclaims_total{team="ml"} 1.0' in metrics
    assert 'tunefleet_preemptions_total{team="ml"} 1.0' in metrics
    worker.close()
