"""End to end, a day of a shared fleet (issue 24): a real orchestrator process, three
users in two teams, limits and an approval rule, and simulated four-GPU workers speaking
the wire protocol (tests.server.protocol.WorkerClient: a real agent has no GPUs here).

alice (researcher) and bob (lead) are in team nlp, carol (lead) in team vision. Each user
runs one job at a time, nlp holds at most 3 GPUs, and a job asking for more than 2 GPUs
waits for a lead's approval. The submits show every wait reason, the approval and the
rejection paths, that other teams' jobs are 404s (and deciding them a 403 naming whose
team it is), and that usage per user and per team is the sum of the attempts' GPU time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import ApiError, Orchestrator, wait_until, write_tiny_config
from tests.server.protocol import WorkerClient

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

GPUS_PER_WORKER = 4
GPU_INFO = {
    "name": "NVIDIA A100-SXM4-80GB",
    "vram_gb": 80,
    "count": GPUS_PER_WORKER,
    "driver": "12.4",
    "accelerator": "cuda",
}


class SimulatedWorkers:
    """Agents in a background thread, four GPUs each: a job they are given runs (reported
    running, with one log line) until the test releases it, then is reported completed.
    They heartbeat every 0.5 s, well inside the harness's 3 s heartbeat timeout."""

    def __init__(self, url: str, tokens: dict[str, str]) -> None:
        self.url = url
        self.tokens = tokens
        self.released: set[str] = set()
        self.ran: dict[str, str] = {}  # job id -> worker name
        self.errors: list[BaseException] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="simulated-workers", daemon=True)

    def start(self) -> SimulatedWorkers:
        self.thread.start()
        return self

    def release(self, *job_ids: str) -> None:
        self.released.update(job_ids)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=15)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported by the test, not lost in the thread
            self.errors.append(error)

    async def _main(self) -> None:
        async with aiohttp.ClientSession(base_url=self.url) as session:
            await asyncio.gather(*(self._one(session, n, t) for n, t in self.tokens.items()))

    async def _post(self, worker: WorkerClient, path: str, body: Any) -> None:
        resp = await worker.post(path, body)
        text = await resp.text()  # read: the connection goes back to the pool
        if resp.status != 200:
            raise AssertionError(f"{path}: {resp.status} {text}")

    async def _beat(self, worker: WorkerClient, state: dict[str, str | None]) -> None:
        while True:
            job_id = state["job"]
            body = {
                "worker_id": worker.worker_id,
                "status": "busy" if job_id else "idle",
                "current_job_id": job_id,
            }
            await self._post(worker, "/api/workers/heartbeat", body)
            await asyncio.sleep(0.5)

    async def _one(self, session: aiohttp.ClientSession, name: str, token: str) -> None:
        worker = WorkerClient(session, token)  # type: ignore[arg-type]
        stream = await worker.connect(
            name,
            gpu_info=GPU_INFO,
            gpu_count=GPUS_PER_WORKER,
            gpu_name=GPU_INFO["name"],
            gpu_vram_gb=80,
            accelerator_type="cuda",
        )
        state: dict[str, str | None] = {"job": None}
        beat = asyncio.create_task(self._beat(worker, state))
        try:
            while not self.stopping.is_set():
                if beat.done():
                    beat.result()  # a refused heartbeat fails the thread
                try:
                    frame = await stream.next_event(timeout_s=0.3)
                except AssertionError:  # nothing within 0.3 s
                    continue
                if frame.event != "job_submit":
                    continue
                job_id = str(frame.data["job_id"])
                status = f"/api/workers/job/{job_id}/status"
                await self._post(worker, status, {"status": "starting", "error": None})
                state["job"] = job_id
                self.ran[job_id] = name
                await self._post(worker, status, {"status": "running", "error": None})
                resp = await worker.send_logs(job_id, [f"{name} trains {job_id}"])
                await resp.read()
                deadline = time.monotonic() + 60
                while job_id not in self.released and not self.stopping.is_set():
                    if time.monotonic() > deadline:
                        raise AssertionError(f"job {job_id} was never released")
                    await asyncio.sleep(0.05)
                await self._post(worker, status, {"status": "completed", "error": None})
                state["job"] = None
        finally:
            beat.cancel()
            worker.close()


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[Orchestrator]:
    configs = tmp_path / "configs"
    write_tiny_config(configs, "quick", max_train_steps=5, step_seconds=0.01)
    orch = Orchestrator(tmp_path / "data", configs).start()
    yield orch
    orch.stop()


def api_error(call: Any, *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(*args, **kwargs)
    return caught.value


def test_a_day_of_two_teams_limits_approvals_isolation_and_usage(
    orchestrator: Orchestrator,
) -> None:
    orch = orchestrator
    started = time.monotonic()

    # --- the admin's morning: teams, people, tokens, limits, a rule ----------------------
    for team in ("nlp", "vision"):
        orch.request("POST", "/api/admin/teams", {"name": team})
    people = {"alice": ("researcher", "nlp"), "bob": ("lead", "nlp"), "carol": ("lead", "vision")}
    tokens: dict[str, str] = {}
    for name, (role, team) in people.items():
        orch.request("POST", "/api/admin/users", {"name": name, "role": role, "teams": [team]})
        body = {"name": f"{name}-laptop", "user": name}
        tokens[name] = str(orch.request("POST", "/api/admin/tokens", body)["token"])
    limits = orch.request("POST", "/api/queue/concurrency", {"user_max_concurrent": 1})
    assert limits["user_max_concurrent"] == 1
    orch.request("POST", "/api/admin/teams/nlp/limits", {"max_gpus": 3})
    rule = {"condition": "gpus_exceed", "threshold": "2", "exempt_roles": ["admin"]}
    assert orch.request("POST", "/api/admin/approval-rules", rule)["description"] == (
        "more than 2 GPUs"
    )

    def as_user(user: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return orch.request(method, path, body, token=tokens[user])

    def submit(user: str, gpus: int, **extra: Any) -> dict[str, Any]:
        body = {"config_name": "quick", "target": "worker", "gpu_count": gpus, **extra}
        answer = as_user(user, "POST", "/api/queue/submit", body)
        assert answer["success"] is True, answer
        return answer  # type: ignore[no-any-return]

    def waits_because(job_id: str, reason: str) -> None:
        def reason_now() -> bool:
            job = orch.job(job_id)
            return job["status"] == "pending" and job["wait_reason"] == reason

        wait_until(reason_now, 15, 0.1, f"{job_id} to wait with {reason!r}: {orch.job(job_id)}")

    # Three simulated four-GPU workers join.
    created = {name: orch.create_worker(name) for name in ("gpu-a", "gpu-b", "gpu-c")}
    workers = SimulatedWorkers(orch.url, {n: c["token"] for n, c in created.items()}).start()
    try:
        for worker in created.values():
            orch.wait_worker(worker["worker_id"], "idle")

        # --- submits: each wait reason ------------------------------------------------
        a1 = submit("alice", 2)["job_id"]
        orch.wait_job(a1, {"running"}, timeout_s=15)
        a2 = submit("alice", 1)["job_id"]  # nlp has a GPU to spare; alice has no job left
        waits_because(a2, "user alice runs 1 of their 1 jobs (user_max_concurrent)")
        b1 = submit("bob", 2)["job_id"]  # bob runs nothing, but nlp holds 2 of its 3 GPUs
        waits_because(b1, "team nlp runs 2 of its 3 GPUs; this job needs 2")
        c1 = submit("carol", 1)["job_id"]  # vision is not held behind nlp's jobs
        orch.wait_job(c1, {"running"}, timeout_s=15)
        assert orch.job(c1)["team"] == "vision"

        held = "awaiting approval by a lead of team nlp (rule: more than 2 GPUs)"
        a3_answer = submit("alice", 3)
        a3 = a3_answer["job_id"]
        assert (a3_answer["status"], a3_answer["queue_position"], a3_answer["reason"]) == (
            "pending_approval",
            None,
            held,
        )
        a4 = submit("alice", 3, name="too-big")["job_id"]
        for job_id in (a3, a4):
            job = orch.job(job_id)
            assert (job["status"], job["wait_reason"]) == ("pending_approval", held)
        position = as_user("alice", "GET", f"/api/queue/position/{a2}")
        assert position["reason"] == "user alice runs 1 of their 1 jobs (user_max_concurrent)"

        # --- across teams: 404, not 403; deciding another team's job: 403 -------------
        a1_logs = as_user("alice", "GET", f"/api/queue/{a1}/logs")
        assert any(f"trains {a1}" in line["line"] for line in a1_logs["lines"])
        assert as_user("bob", "GET", f"/api/queue/{a1}")["user"] == "alice"  # her team's
        for suffix in ("", "/logs", "/metrics", "/artifacts"):
            as_user("alice", "GET", f"/api/queue/{a1}{suffix}")  # hers: 200
            error = api_error(as_user, "carol", "GET", f"/api/queue/{a1}{suffix}")
            assert error.status == 404, (suffix, error.body)
            never = api_error(as_user, "carol", "GET", f"/api/queue/j_neverused{suffix}")
            assert never.status == 404, (suffix, never.body)
            assert "alice" not in str(error.body) and "nlp" not in str(error.body)
        carol_sees = {job["job_id"] for job in as_user("carol", "GET", "/api/queue")["jobs"]}
        assert carol_sees == {c1}
        assert as_user("carol", "GET", "/api/queue/approvals")["jobs"] == []
        denied = api_error(as_user, "carol", "POST", f"/api/queue/{a3}/approve", {})
        assert denied.status == 403, denied.body
        assert f"job {a3} is team nlp's (user alice)" in denied.body["detail"], denied.body
        assert orch.job(a3)["status"] == "pending_approval"
        no_lead = api_error(as_user, "alice", "POST", f"/api/queue/{a3}/approve", {})
        assert no_lead.status == 403, no_lead.body
        bobs = [job["job_id"] for job in as_user("bob", "GET", "/api/queue/approvals")["jobs"]]
        assert bobs == [a3, a4]

        # --- the rejection path, then the approval path --------------------------------
        reason = "three GPUs twice is too much today"
        rejected = as_user("bob", "POST", f"/api/queue/{a4}/reject", {"reason": reason})
        assert rejected["status"] == "cancelled"
        job = orch.job(a4)
        assert job["status"] == "cancelled" and job["attempt_history"] == []
        assert job["error"].startswith("rejected by ") and job["error"].endswith(f": {reason}")
        assert "bob" in job["error"], job["error"]
        approved = as_user("bob", "POST", f"/api/queue/{a3}/approve", {})
        assert approved["status"] == "pending"
        again = api_error(as_user, "bob", "POST", f"/api/queue/{a3}/approve", {})
        assert again.status == 409, again.body
        # Approved, it now waits like any job: alice still runs a1.
        waits_because(a3, "user alice runs 1 of their 1 jobs (user_max_concurrent)")

        # --- the afternoon: jobs end, the held ones run in their order -----------------
        workers.release(a1)
        orch.wait_job(a1, {"completed"}, timeout_s=15)
        orch.wait_job(a2, {"running"}, timeout_s=15)  # alice's older job before her a3
        orch.wait_job(b1, {"running"}, timeout_s=15)  # nlp: 1 + 2 of its 3 GPUs
        assert orch.job(a3)["status"] == "pending"
        workers.release(a2, b1, c1)
        orch.wait_job(a3, {"running"}, timeout_s=15)
        workers.release(a3)
        finished = {job_id: orch.wait_job(job_id, {"completed"}) for job_id in (a1, a2, b1, c1, a3)}
        assert set(workers.ran) == {a1, a2, b1, c1, a3}
        assert not workers.errors, workers.errors
    finally:
        workers.stop()
    assert not workers.errors, workers.errors

    # --- usage: the sum of the attempts' GPU time ------------------------------------------
    by_user: dict[str, float] = {}
    by_team: dict[str, float] = {}
    for job in finished.values():
        history = job["attempt_history"]
        assert len(history) == 1 and history[0]["outcome"] == "completed", history
        seconds = sum(attempt["gpu_seconds"] for attempt in history)
        assert seconds > 0
        by_user[job["user"]] = by_user.get(job["user"], 0.0) + seconds
        by_team[job["team"]] = by_team.get(job["team"], 0.0) + seconds
    assert set(by_user) == {"alice", "bob", "carol"} and set(by_team) == {"nlp", "vision"}

    def totals(answer: dict[str, Any]) -> dict[str, float]:
        return {row["name"]: row["gpu_seconds"] for row in answer["totals"]}

    usage_users = orch.request("GET", "/api/usage?by=user")
    usage_teams = orch.request("GET", "/api/usage?by=team")
    assert totals(usage_users) == pytest.approx(by_user, abs=1e-6)
    assert totals(usage_teams) == pytest.approx(by_team, abs=1e-6)
    assert usage_users["total_gpu_seconds"] == pytest.approx(sum(by_user.values()), abs=1e-6)
    assert usage_teams["total_gpu_seconds"] == pytest.approx(sum(by_team.values()), abs=1e-6)
    # Who sees whose: alice her own, carol (a lead) her team's, nothing of nlp.
    alices = totals(as_user("alice", "GET", "/api/usage?by=user"))
    assert alices == pytest.approx({"alice": by_user["alice"]}, abs=1e-6)
    carols = totals(as_user("carol", "GET", "/api/usage?by=team"))
    assert carols == pytest.approx({"vision": by_team["vision"]}, abs=1e-6)
    assert time.monotonic() - started < 60
