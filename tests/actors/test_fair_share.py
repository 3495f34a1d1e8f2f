"""fair_share.py's policy, function by function (issue 25): quotas and flavors, borrowing
and its limit, decayed usage and standing, the order of a pass, and victim choice."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunefleet.actors.fair_plan import plan_fair
from tunefleet.actors.fair_share import (
    InvalidQuota,
    QuotaBook,
    ReclaimRules,
    RunningJob,
    TeamQuota,
    UsageLedger,
    Verdict,
    book_of,
    borrowed,
    borrowing_jobs,
    choose_victim,
    decayed_gpu_seconds,
    quota_hold_reason,
    quota_warnings,
    standings,
    verdict,
    within_quota,
)
from tunefleet.actors.matching import PendingJob, Requirements, WorkerView
from tunefleet.usage import AttemptSpan, attempt_gpu_seconds

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    "quota",
    [
        {"weight": 0},
        {"weight": -1},
        {"weight": math.nan},
        {"gpus": -1},
        {"borrow_limit": -1},
        {"flavors": {"*A100*": -2}},
        {"flavors": {"": 2}},
    ],
)
def test_an_impossible_quota_is_refused(quota: dict[str, object]) -> None:
    with pytest.raises(InvalidQuota):
        TeamQuota(**quota)  # type: ignore[arg-type]


def test_a_flavor_is_a_case_insensitive_gpu_name_glob_first_in_sorted_order() -> None:
    quota = TeamQuota(flavors={"*h100*": 4, "*A100*": 8, "*NVIDIA*": 1})
    assert quota.flavor_of(A100) == "*A100*"
    assert quota.flavor_of(H100) == "*NVIDIA*"  # sorted: "*NVIDIA*" < "*h100*"
    assert quota.flavor_of(None) is None
    assert quota.flavor_of("AMD MI300X") is None


def test_within_and_borrowed_in_all_and_per_flavor() -> None:
    total = TeamQuota(gpus=8)
    assert (within_quota(total, {None: 12}), borrowed(total, {None: 12})) == (8, 4)
    flavored = TeamQuota(flavors={"*A100*": 8, "*H100*": 4})
    use = {"*A100*": 10, "*H100*": 2, None: 3}
    assert within_quota(flavored, use) == 10  # 8 A100 + 2 H100; the rest is borrowed
    assert borrowed(flavored, use) == 5
    both = TeamQuota(gpus=9, flavors={"*A100*": 8})
    assert within_quota(both, {"*A100*": 8, None: 3}) == 9  # the total caps it
    assert borrowed(TeamQuota(), {None: 2}) == 2  # no quota: everything is borrowed


def test_a_verdict_says_within_borrow_or_capped() -> None:
    quota = TeamQuota(gpus=4, borrow_limit=2)
    assert verdict(quota, {None: 2}, None, 2) is Verdict.WITHIN
    assert verdict(quota, {None: 4}, None, 2) is Verdict.BORROW
    assert verdict(quota, {None: 4}, None, 3) is Verdict.CAPPED
    assert verdict(quota, {None: 3}, None, 2) is Verdict.BORROW  # one GPU borrowed is borrowing
    assert verdict(TeamQuota(borrow_limit=0), {}, None, 0) is Verdict.WITHIN  # a CPU job


def test_decayed_usage_halves_every_half_life_and_is_gpu_seconds_without_decay() -> None:
    h = 100.0
    fresh = decayed_gpu_seconds(2, 0.0, 10.0, 10.0, h)
    assert decayed_gpu_seconds(2, 0.0, 10.0, 110.0, h) == pytest.approx(fresh / 2)
    span = AttemptSpan("j", 1, None, "a", 2, 0.0, 10.0)
    assert decayed_gpu_seconds(2, 0.0, 10.0, 10.0, 1e12) == pytest.approx(
        attempt_gpu_seconds(span, 10.0)
    )


spans = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.integers(0, 4),
        st.floats(0, 1000),
        st.floats(0, 500),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(spans=spans, now_after=st.floats(0, 2000))
def test_the_ledger_kept_incrementally_equals_the_sum_over_attempts(
    spans: list[tuple[str, int, float, float]], now_after: float
) -> None:
    """Folded in as they end, in any order, decayed lazily: the same as summing every
    attempt's decayed GPU-seconds afresh (no second counter drifting away)."""
    h = 300.0
    ledger = UsageLedger(h)
    last = 0.0
    for team, gpus, start, length in spans:
        ledger.add_ended(team, gpus, start, start + length)
        last = max(last, start + length)
    now = last + now_after
    got = ledger.decayed(now)
    for team in ("a", "b"):
        expected = sum(
            decayed_gpu_seconds(g, s, s + n, now, h) for t, g, s, n in spans if t == team
        )
        assert got.get(team, 0.0) == pytest.approx(expected, rel=1e-9, abs=1e-6)


def test_the_ledger_counts_a_holding_job_until_it_is_seen_gone() -> None:
    from tunefleet.actors.fair_share import Holding

    ledger = UsageLedger(1e12)
    ledger.observe([Holding("j1", "a", 2, 100.0)], 100.0)
    assert ledger.decayed(110.0)["a"] == pytest.approx(20.0)
    ledger.observe([], 120.0)  # ended: 2 GPUs x 20 s, kept
    assert ledger.decayed(500.0)["a"] == pytest.approx(40.0)
    with pytest.raises(InvalidQuota):
        UsageLedger(0)


def test_the_ledger_ends_an_attempt_when_its_worker_is_freed() -> None:
    from tunefleet.actors.fair_share import Holding

    ledger = UsageLedger(1e12)
    ledger.hold(Holding("j1", "a", 2, 100.0, "w1"))
    ledger.hold(Holding("j1", "a", 2, 105.0, "w1"))  # told again: the first start stays
    ledger.release_worker("w2", 130.0)  # another worker: nothing of j1's
    assert ledger.decayed(130.0)["a"] == pytest.approx(60.0)
    ledger.release_worker("w1", 130.0)  # freed at 130: 2 GPUs x 30 s, no more
    ledger.observe([], 500.0)  # not counted again when a later pass sees it gone
    assert ledger.decayed(500.0)["a"] == pytest.approx(60.0)


def test_standing_is_decayed_usage_over_weight() -> None:
    got = standings({"a": 100.0, "b": 100.0, None: 10.0}, {"b": TeamQuota(weight=4)})
    assert got == {"a": 100.0, "b": 25.0, None: 10.0}


def _job(job_id: str, team: str, seq: int, gpus: int = 1, priority: int = 0) -> PendingJob:
    return PendingJob(job_id, priority, seq, Requirements("worker", gpu_count=gpus), team=team)


def _workers(count: int, name: str = A100) -> list[WorkerView]:
    return [WorkerView(f"w{i}", gpu_count=1, gpu_name=name) for i in range(count)]


def test_a_pass_goes_by_priority_then_quota_then_standing_then_submission() -> None:
    quotas = {"a": TeamQuota(gpus=1), "b": TeamQuota(gpus=1)}
    book = QuotaBook(quotas)
    book.add("a", A100, 1)  # a is at its quota: its next job would borrow
    pending = [
        _job("a-old", "a", 1),
        _job("b-new", "b", 5),
        _job("c", "c", 2),  # no quota: borrows
        _job("a-urgent", "a", 9, priority=5),
    ]
    placed = plan_fair(pending, _workers(2), book, {"a": 0.0, "c": 10.0})
    # a's urgent job first (priority, though it borrows); then b within its quota, before
    # a-old and c, which would borrow and were submitted before it.
    assert [job for job, _ in placed] == ["a-urgent", "b-new"]
    # All within quota or not, one priority: lower standing first (b has none: 0), then
    # a (5); c borrows (no quota) and comes last although its standing is lower.
    placed = plan_fair(pending[:3], _workers(3), QuotaBook(quotas), {"a": 5.0, "c": 1.0})
    assert [job for job, _ in placed] == ["b-new", "a-old", "c"]
    # Among borrowers, standing decides: the a job (standing 0) before c (10).
    book = QuotaBook(quotas)
    book.add("a", A100, 1)
    placed = plan_fair(pending[:3], _workers(2), book, {"a": 0.0, "c": 10.0, "b": 0.0})
    assert [job for job, _ in placed] == ["b-new", "a-old"]


def test_a_pass_never_takes_a_team_past_its_borrowing_limit() -> None:
    quotas = {"a": TeamQuota(gpus=1, borrow_limit=1)}
    pending = [_job(f"a{i}", "a", i) for i in range(4)]
    placed = plan_fair(pending, _workers(4), QuotaBook(quotas), {})
    assert len(placed) == 2


def test_a_job_takes_a_worker_of_a_flavor_its_team_has_room_in() -> None:
    quotas = {"a": TeamQuota(flavors={"*H100*": 1}, borrow_limit=0)}
    workers = [
        WorkerView("wa", gpu_count=1, gpu_name=A100),
        WorkerView("wh", gpu_count=1, gpu_name=H100),
    ]
    placed = plan_fair([_job("j", "a", 1)], workers, QuotaBook(quotas), {})
    assert placed == [("j", "wh")]  # wa fits best, but a may not borrow


def test_a_retry_keeps_off_the_workers_it_failed_on_in_a_fair_pass() -> None:
    """Issue 26 under quotas: the scheduler's exclusion (retry_policy.exclusion) holds in
    plan_fair as in matching.plan, and does not make the requirements hopeless for the
    jobs behind it."""
    workers = _workers(2)
    retry = replace(_job("retry", "a", 1), exclude=frozenset({workers[0].worker_id}))
    placed = plan_fair([retry], workers, QuotaBook({}), {})
    assert placed == [("retry", workers[1].worker_id)]
    # Only the excluded one is idle: the retry waits, the next job with the same
    # requirements takes it.
    placed = plan_fair([retry, _job("next", "a", 2)], workers[:1], QuotaBook({}), {})
    assert placed == [("next", workers[0].worker_id)]


def _running(
    job_id: str, team: str, since: float, *, gpus: int = 1, priority: int = 0, worker: str = ""
) -> RunningJob:
    return RunningJob(job_id, team, priority, gpus, worker or f"w-{job_id}", A100, since)


def test_borrowing_jobs_are_the_youngest_beyond_the_quota() -> None:
    running = [_running("old", "a", 1.0), _running("new", "a", 5.0), _running("mid", "a", 3.0)]
    assert borrowing_jobs({"a": TeamQuota(gpus=2)}, running) == {"new"}
    assert borrowing_jobs({}, running) == {"old", "mid", "new"}


def _choose(
    running: list[RunningJob],
    *,
    team: str = "b",
    priority: int = 0,
    fits: dict[str, bool] | None = None,
    last: dict[str, float] | None = None,
    rules: ReclaimRules | None = None,
) -> RunningJob | None:
    quotas = {"a": TeamQuota(gpus=0), "b": TeamQuota(gpus=4)}
    book = book_of(quotas, running)
    fitting = {job.worker_id: True for job in running} | (fits or {})
    return choose_victim(
        team,
        priority,
        1,
        fitting,
        running,
        book,
        borrowing_jobs(quotas, running),
        1000.0,
        last or {},
        rules or ReclaimRules(min_runtime_s=600),
    )


def test_victims_lowest_priority_then_youngest_then_fewest_gpus() -> None:
    low = _running("low", "a", 10.0, priority=-1)
    young = _running("young", "a", 300.0)
    old = _running("old", "a", 100.0)
    assert _choose([old, young, low]) == low
    assert _choose([old, young]) == young
    big = _running("big", "a", 300.0, gpus=4)
    assert _choose([big, young]) == young


def test_no_victim_that_is_protected_does_not_fit_or_is_within_its_quota() -> None:
    fresh = _running("fresh", "a", 900.0)  # ran 100 s of the 600 s minimum
    assert _choose([fresh]) is None
    again = _running("again", "a", 0.0)
    assert _choose([again], last={"again": 700.0}) is None  # preempted 300 s ago
    assert _choose([again], last={"again": 100.0}) == again
    assert _choose([again], fits={again.worker_id: False}) is None  # would not fit after
    mine = _running("mine", "b", 0.0, priority=-5)
    assert _choose([mine], priority=5) is None  # same team: only with priority preemption
    rules = ReclaimRules(min_runtime_s=600, priority_preemption=True)
    assert _choose([mine], priority=5, rules=rules) == mine
    assert _choose([mine], priority=-5, rules=rules) is None


def test_no_victim_when_the_waiting_team_is_not_within_its_quota_there() -> None:
    running = [_running("x", "a", 0.0)]
    quotas = {"a": TeamQuota(gpus=0), "b": TeamQuota(flavors={"*H100*": 4})}
    book = book_of(quotas, running)  # x is on an A100; b's quota covers H100 only
    found = choose_victim(
        "b", 0, 1, {"w-x": True}, running, book, {"x"}, 1000.0, {}, ReclaimRules(0)
    )
    assert found is None


def test_the_wait_reason_names_the_quota_and_the_borrowing_limit() -> None:
    quotas = {"nlp": TeamQuota(flavors={"*A100*": 8}), "cv": TeamQuota(gpus=2, borrow_limit=1)}
    book = QuotaBook(quotas)
    book.add("nlp", A100, 8)
    assert quota_hold_reason(book, "nlp", "*A100*") == (
        "team nlp uses 8 of its 8 A100 (quota); no idle A100 to borrow"
    )
    book.add("cv", A100, 3)
    assert quota_hold_reason(book, "cv", None) == (
        "team cv borrows 1 of its 1 borrowable GPUs (borrow_limit) on top of its quota"
    )
    strict = QuotaBook({"ops": TeamQuota(gpus=2, borrow_limit=0)})
    strict.add("ops", H100, 2)
    assert quota_hold_reason(strict, "ops", None) == (
        "team ops uses 2 of its 2 GPUs (quota) and may not borrow"
    )
    assert quota_hold_reason(book, "other", None) is None
    assert quota_hold_reason(QuotaBook(quotas), "cv", None) is None  # below its quota


def test_warnings_name_an_unmatched_flavor_and_oversubscription() -> None:
    fleet = [(A100, 8)]
    quota = TeamQuota(flavors={"*H100*": 4})
    warnings = quota_warnings("nlp", quota, {"cv": TeamQuota(gpus=6)}, fleet)
    assert any("'*H100*' matches no worker" in w and A100 in w for w in warnings)
    assert any("add up to 10 GPUs but the fleet has 8" in w for w in warnings)
    assert quota_warnings("nlp", TeamQuota(flavors={"*a100*": 8}), {}, fleet) == []
