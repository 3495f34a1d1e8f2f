"""The concurrency limits' policy (tenancy_limits.py), driven directly: a job may start
exactly when starting it keeps every limit, and a held job's reason names the limit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tunefleet.actors.idle_workers import IdleWorkers
from tunefleet.actors.matching import PendingJob, Requirements, WorkerView, plan
from tunefleet.actors.tenancy_limits import (
    ConcurrencyLimits,
    Holder,
    LimitGate,
    TeamLimits,
    Usage,
    hold_reason,
    team_limit_warning,
    usage_of,
)

USERS = ["ann", "bob", "cy", None]
TEAMS = ["nlp", "vision", None]

limit_values = st.one_of(st.none(), st.integers(min_value=0, max_value=6))
holders = st.builds(
    Holder,
    user=st.sampled_from(USERS),
    team=st.sampled_from(TEAMS),
    gpus=st.integers(min_value=0, max_value=4),
)
team_limits = st.builds(TeamLimits, max_jobs=limit_values, max_gpus=limit_values)
limit_sets = st.builds(
    ConcurrencyLimits,
    max_concurrent=limit_values,
    user_max_concurrent=limit_values,
    teams=st.dictionaries(st.sampled_from(["nlp", "vision"]), team_limits, max_size=2),
)


def _within(limits: ConcurrencyLimits, usage: Usage) -> bool:
    """Every limit kept by these counts (the oracle, written from the definition)."""
    if limits.max_concurrent and usage.jobs > limits.max_concurrent:
        return False
    if limits.user_max_concurrent and any(
        n > limits.user_max_concurrent for n in usage.user_jobs.values()
    ):
        return False
    for name, team in limits.teams.items():
        if team.max_jobs and usage.team_jobs[name] > team.max_jobs:
            return False
        if team.max_gpus and usage.team_gpus[name] > team.max_gpus:
            return False
    return True


@given(limit_sets, st.lists(holders, max_size=12), holders)
@settings(max_examples=300, deadline=None)
def test_a_job_may_start_exactly_when_starting_it_keeps_every_limit(
    limits: ConcurrencyLimits, running: list[Holder], job: Holder
) -> None:
    usage = usage_of(running)
    after = usage_of([*running, job])
    reason = hold_reason(limits, usage, job)
    if _within(limits, usage):
        # From counts within the limits, it starts iff the counts stay within them.
        assert (reason is None) == _within(limits, after)
    elif reason is None:
        # Over a limit already (it was lowered): only a job the exceeded limit does not
        # concern may start, and every limit that concerns it still holds after.
        assert _keeps_for(limits, after, job)


def _keeps_for(limits: ConcurrencyLimits, usage: Usage, job: Holder) -> bool:
    if limits.max_concurrent and usage.jobs > limits.max_concurrent:
        return False
    user_max = limits.user_max_concurrent
    if user_max and job.user is not None and usage.user_jobs[job.user] > user_max:
        return False
    team = limits.teams.get(job.team) if job.team is not None else None
    if team is None or job.team is None:
        return True
    if team.max_jobs and usage.team_jobs[job.team] > team.max_jobs:
        return False
    return not (team.max_gpus and usage.team_gpus[job.team] > team.max_gpus)


@given(limit_sets, st.lists(holders, max_size=12), holders)
@settings(max_examples=200, deadline=None)
def test_a_held_jobs_reason_names_the_limit_and_its_number(
    limits: ConcurrencyLimits, running: list[Holder], job: Holder
) -> None:
    reason = hold_reason(limits, usage_of(running), job)
    if reason is None:
        return
    if "max_concurrent" in reason and "user_max" not in reason:
        assert f"of its {limits.max_concurrent} jobs" in reason
    elif "user_max_concurrent" in reason:
        assert f"user {job.user} runs" in reason
        assert f"of their {limits.user_max_concurrent} jobs" in reason
    else:
        assert job.team is not None
        team = limits.teams[job.team]
        assert reason.startswith(f"team {job.team} ")
        assert str(team.max_jobs) in reason or str(team.max_gpus) in reason


def test_team_gpu_reason_reads_as_the_issue_says() -> None:
    limits = ConcurrencyLimits(teams={"nlp": TeamLimits(max_gpus=8)})
    usage = usage_of([Holder("ann", "nlp", 4), Holder("bob", "nlp", 4)])
    assert hold_reason(limits, usage, Holder("cy", "nlp", 1)) == "team nlp runs 8 of its 8 GPUs"
    part = usage_of([Holder("ann", "nlp", 6)])
    assert (
        hold_reason(limits, part, Holder("cy", "nlp", 4))
        == "team nlp runs 6 of its 8 GPUs; this job needs 4"
    )
    too_big = hold_reason(limits, Usage(), Holder("cy", "nlp", 9))
    assert too_big is not None and "at most 8 GPUs" in too_big


def test_zero_and_none_are_unlimited_and_an_all_unlimited_set_is_the_fast_path() -> None:
    limits = ConcurrencyLimits(0, 0, {"nlp": TeamLimits(0, 0)})
    assert limits.unlimited
    assert limits.teams == {}
    assert (
        hold_reason(limits, usage_of([Holder("a", "nlp", 4)] * 50), Holder("a", "nlp", 4)) is None
    )
    assert not ConcurrencyLimits(user_max_concurrent=1).unlimited


def test_a_team_limit_above_the_fleet_is_warned_about_not_refused() -> None:
    warning = team_limit_warning("nlp", TeamLimits(max_gpus=16), fleet_gpus=8)
    assert warning is not None and "16" in warning and "8" in warning
    assert team_limit_warning("nlp", TeamLimits(max_gpus=8), fleet_gpus=8) is None
    assert team_limit_warning("nlp", TeamLimits(max_jobs=99), fleet_gpus=0) is None


jobs_strategy = st.lists(
    st.tuples(st.sampled_from(USERS), st.sampled_from(TEAMS), st.integers(0, 2)),
    max_size=25,
)


@given(limit_sets, st.lists(holders, max_size=6), jobs_strategy, st.integers(0, 12))
@settings(max_examples=200, deadline=None)
def test_a_gated_plan_never_exceeds_a_limit_and_skips_only_held_jobs(
    limits: ConcurrencyLimits,
    running: list[Holder],
    jobs: list[tuple[str | None, str | None, int]],
    worker_count: int,
) -> None:
    pending = [
        PendingJob(f"j_{n}", 0, n, Requirements("worker", gpu_count=g), user=u, team=t)
        for n, (u, t, g) in enumerate(jobs)
    ]
    workers = [WorkerView(f"w_{n:02}", gpu_count=2) for n in range(worker_count)]
    usage = usage_of(running)
    start_within = _within(limits, usage)
    gate = LimitGate(limits, usage_of(running))
    placed = dict(plan(pending, IdleWorkers(workers), gate))
    by_id = {job.job_id: job for job in pending}
    after = usage_of([*running, *(by_id[j].holder() for j in placed)])
    if start_within:
        assert _within(limits, after)
    # Walked in order: a job left unplaced while a worker stayed free was held by a limit
    # as the counts stood when its turn came.
    counted = usage_of(running)
    free = len(workers) - len(placed)
    for job in pending:
        if job.job_id in placed:
            counted.add(job.holder())
        elif free:
            assert hold_reason(limits, counted, job.holder()) is not None


def test_a_held_user_does_not_block_the_users_behind() -> None:
    limits = ConcurrencyLimits(user_max_concurrent=1)
    pending = [
        PendingJob("j_1", 0, 1, Requirements("worker"), user="ann"),
        PendingJob("j_2", 0, 2, Requirements("worker"), user="ann"),
        PendingJob("j_3", 0, 3, Requirements("worker"), user="bob"),
    ]
    workers = IdleWorkers([WorkerView("w_1", gpu_count=1), WorkerView("w_2", gpu_count=1)])
    placed = dict(plan(pending, workers, LimitGate(limits, Usage())))
    assert set(placed) == {"j_1", "j_3"}
