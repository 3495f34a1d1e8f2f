"""A reclaim in flight serves its team even when another of the team's jobs takes the
first freed worker (seen end to end, tests/e2e/test_e2e_fair_share_agents.py): team b
reclaims w1 for b1 and w2 for b2; w2 frees first and the pass gives it to b1; b2 then
waits for w1, still being freed, instead of reclaiming a third victim."""

from __future__ import annotations

from tunefleet.actors.fair_share import Reclaim, RunningJob, TeamQuota, book_of
from tunefleet.actors.fair_share_state import FairShareSettings, FairShareState
from tunefleet.actors.matching import PendingJob, Requirements, WorkerView

GPU = "NVIDIA A100-SXM4-80GB"


def running(job_id: str, team: str, worker_id: str) -> RunningJob:
    return RunningJob(job_id, team, 0, 1, worker_id, GPU, since=0.0)


def pending(job_id: str, seq: int) -> PendingJob:
    return PendingJob(job_id, 0, seq, Requirements("worker", gpu_count=1), team="b")


def state() -> FairShareState:
    fair = FairShareState(FairShareSettings(3600.0, 0.0, False))
    fair.set_quotas({"a": TeamQuota(gpus=0), "b": TeamQuota(gpus=2)})
    return fair


FLEET = {w: WorkerView(w, gpu_count=1, gpu_name=GPU) for w in ("w1", "w2", "w3", "w4")}


def test_the_job_a_freed_worker_went_to_passes_its_claim_on() -> None:
    fair = state()
    for victim, worker_id, for_job in (("a1", "w1", "b1"), ("a2", "w2", "b2")):
        fair.started(Reclaim(for_job, "b", victim, "a", worker_id, "test"), 10.0)
    # a2 stopped and w2 was free: its reclaim is done; w1 (a1) is not free yet.
    now_running = [running("a3", "a", "w3"), running("a4", "a", "w4")]
    fair.observe(now_running, 11.0, free=lambda worker_id: worker_id == "w2")
    # The pass gave w2 to b1, not b2; b2 waits.
    now_running.append(running("b1", "b", "w2"))
    book = book_of(fair.quotas, now_running)
    decisions = fair.reclaims([pending("b2", 2)], now_running, book, FLEET, 11.0)
    assert decisions == []  # b2 waits for w1, which a1's stop is freeing


def test_a_claim_passes_only_to_a_job_of_its_team_that_fits_the_worker() -> None:
    fair = state()
    fair.started(Reclaim("b1", "b", "a1", "a", "w1", "test"), 10.0)
    now_running = [running("b1", "b", "w2"), running("a3", "a", "w3"), running("a4", "a", "w4")]
    book = book_of(fair.quotas, now_running)
    too_big = PendingJob("b2", 0, 2, Requirements("worker", gpu_count=2), team="b")
    assert fair.reclaims([too_big], now_running, book, FLEET, 11.0) == []  # fits no worker
    decisions = fair.reclaims([pending("b3", 3)], now_running, book, FLEET, 11.0)
    assert decisions == []  # b3 fits w1: it inherits b1's claim
    fair.failed(Reclaim("b1", "b", "a1", "a", "w1", "test"))
    [decision] = fair.reclaims([pending("b3", 3)], now_running, book, FLEET, 11.0)
    assert decision.job_id == "b3" and decision.victim in {"a3", "a4"}
