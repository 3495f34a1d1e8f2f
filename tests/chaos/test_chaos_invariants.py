"""The invariant checker on made-up evidence: it passes a clean run and catches each
violation it exists for (a checker that cannot fail would make the chaos suites
worthless). Fast and pure: no processes."""

from __future__ import annotations

import dataclasses

import pytest

from tests.chaos.chaos_invariants import (
    AttemptView,
    Evidence,
    Execution,
    JobView,
    LedgerLine,
    TimelineEntry,
    check,
)
from tunefleet.fsm.job import MAX_UNDELIVERED

T0 = 1_700_000_000.0
W1, W2 = "w_one", "w_two"


def lost_then_completed(job_id: str = "j_1", base: float = T0) -> JobView:
    """Attempt 1 on W1 lost at +5; attempt 2 on W2 from +6, completed at +9."""
    return JobView(
        job_id=job_id,
        status="completed",
        attempts=2,
        max_retries=3,
        worker_id=W2,
        error=None,
        history=(
            AttemptView(1, W1, base + 1, base + 1.1, base + 5, "lost", "heartbeat timeout"),
            AttemptView(2, W2, base + 6, base + 6.1, base + 9, "completed", None),
        ),
        timeline=(
            TimelineEntry(base, "submitted", None, None),
            TimelineEntry(base + 1, "dispatched", W1, 1),
            TimelineEntry(base + 1.1, "started", W1, 1),
            TimelineEntry(base + 5, "requeued", W1, 1),
            TimelineEntry(base + 6, "dispatched", W2, 2),
            TimelineEntry(base + 6.1, "started", W2, 2),
            TimelineEntry(base + 9, "completed", W2, 2),
        ),
    )


def run(
    job_id: str, attempt: int, worker: str, start: float, end: float | None, **kw: object
) -> Execution:
    fields: dict[str, object] = {
        "pid": 100 + attempt,
        "agent_pid": 10 if worker == W1 else 20,
        "exit_code": 0,
    }
    fields.update(kw)
    return Execution(job_id, attempt, worker, started_at=start, ended_at=end, **fields)  # type: ignore[arg-type]


def clean() -> Evidence:
    job = lost_then_completed()
    return Evidence(
        jobs={job.job_id: job},
        accepted={job.job_id},
        executions=[
            # attempt 1's trainer ran on past the loss (a partitioned agent): a zombie
            run("j_1", 1, W1, T0 + 1.05, T0 + 7, exit_code=0),
            run("j_1", 2, W2, T0 + 6.05, T0 + 8.9),
        ],
        ledger=[LedgerLine("j_1", 1, T0 + 7), LedgerLine("j_1", 2, T0 + 8.9)],
        killed_agent_pids=set(),
    )


def replace_attempt(job: JobView, number: int, **changes: object) -> JobView:
    history = tuple(
        dataclasses.replace(a, **changes) if a.number == number else a  # type: ignore[arg-type]
        for a in job.history
    )
    return dataclasses.replace(job, history=history)


def test_a_clean_run_passes_and_counts_what_cannot_be_prevented() -> None:
    findings = check(clean())
    assert findings.violations == []
    assert findings.stats["zombie_runs"] == 1
    assert findings.stats["duplicate_completions_of_lost_attempts"] == 1
    assert findings.stats["jobs_completed"] == 1


def test_an_accepted_job_that_vanished() -> None:
    evidence = clean()
    evidence.accepted.add("j_gone")
    assert any("j_gone" in v and "no longer in the queue" in v for v in check(evidence).violations)


def test_a_job_on_two_workers_at_once() -> None:
    evidence = clean()
    evidence.jobs["j_1"] = replace_attempt(evidence.jobs["j_1"], 2, dispatched_at=T0 + 4)
    assert any("two workers at once" in v for v in check(evidence).violations)


def test_a_worker_holding_two_jobs() -> None:
    evidence = clean()
    other = lost_then_completed("j_2", base=T0 + 2)  # its attempt 2 on W2 from +8 overlaps
    evidence.jobs["j_2"] = other
    evidence.executions.append(run("j_2", 2, W2, T0 + 8.05, T0 + 10.9, pid=300))
    evidence.ledger.append(LedgerLine("j_2", 2, T0 + 10.9))
    violations = check(evidence).violations
    assert any(f"{W2} held two jobs at once" in v for v in violations)
    assert any("agent process 20 ran two trainers at once" in v for v in violations)


def test_completed_twice() -> None:
    evidence = clean()
    evidence.jobs["j_1"] = replace_attempt(evidence.jobs["j_1"], 1, outcome="completed")
    evidence.ledger.append(LedgerLine("j_1", 2, T0 + 9))
    violations = check(evidence).violations
    assert any("attempt outcomes are ['completed', 'completed']" in v for v in violations)
    assert any("attempt 2 completed 2 times in the ledger" in v for v in violations)


def test_completed_without_a_successful_trainer() -> None:
    evidence = clean()
    evidence.executions[1] = run("j_1", 2, W2, T0 + 6.05, T0 + 8.9, exit_code=1)
    evidence.ledger = evidence.ledger[:1]
    violations = check(evidence).violations
    assert any("no trainer of attempt 2 exited 0" in v for v in violations)
    assert any("attempt 2 has 0 ledger lines" in v for v in violations)


def test_a_trainer_still_running_when_the_completion_was_recorded() -> None:
    evidence = clean()
    evidence.executions[1] = run("j_1", 2, W2, T0 + 6.05, T0 + 9.5)
    assert any("exited 0 before the completion" in v for v in check(evidence).violations)


@pytest.mark.parametrize(
    ("execution", "expected"),
    [
        (run("j_1", 3, W2, T0 + 6, T0 + 7), "does not record"),
        (run("j_1", 2, W1, T0 + 6.5, T0 + 7), "does not record"),
        (run("j_1", 2, None, T0 + 6.5, T0 + 7), "does not record"),  # type: ignore[arg-type]
        (run("j_1", 2, W2, T0 + 5.5, T0 + 5.9, pid=7), "started before its dispatch"),
    ],
)
def test_a_trainer_the_records_do_not_explain(execution: Execution, expected: str) -> None:
    evidence = clean()
    evidence.executions.append(execution)
    assert any(expected in v for v in check(evidence).violations)


def one_attempt_job(job_id: str, worker: str, start: float, end: float, outcome: str) -> JobView:
    status = "completed" if outcome == "completed" else "pending"
    timeline = [
        TimelineEntry(start - 1, "submitted", None, None),
        TimelineEntry(start, "dispatched", worker, 1),
        TimelineEntry(start, "started", worker, 1),
        TimelineEntry(end, "completed" if outcome == "completed" else "requeued", worker, 1),
    ]
    attempt = AttemptView(
        1, worker, start, start, end, outcome, "lost" if outcome == "lost" else None
    )
    return JobView(job_id, status, 1, 3, worker, None, (attempt,), tuple(timeline))


def test_overlap_on_one_worker_is_only_allowed_for_a_killed_agents_orphan() -> None:
    # W2's agent process 19 ran j_2 and was lost at +22; its trainer ran on to +24 while
    # W2's next agent process (21) already ran j_3.
    evidence = clean()
    evidence.jobs["j_2"] = one_attempt_job("j_2", W2, T0 + 20, T0 + 22, "lost")
    evidence.jobs["j_3"] = one_attempt_job("j_3", W2, T0 + 22.5, T0 + 25, "completed")
    evidence.executions += [
        run("j_2", 1, W2, T0 + 20.05, T0 + 24, pid=400, agent_pid=19, exit_code="raised"),
        run("j_3", 1, W2, T0 + 22.6, T0 + 24.9, pid=401, agent_pid=21),
    ]
    evidence.ledger.append(LedgerLine("j_3", 1, T0 + 24.9))
    evidence.settled = False  # j_2 is pending again
    assert any(f"{W2} ran j_2#1 and j_3#1 at once" in v for v in check(evidence).violations)
    evidence.killed_agent_pids.add(19)
    findings = check(evidence)
    assert findings.violations == []
    assert findings.stats["orphan_overlaps"] == 1
    assert findings.stats["zombie_runs"] == 2


def test_failed_only_after_its_retries_with_a_reason() -> None:
    evidence = clean()
    job = replace_attempt(evidence.jobs["j_1"], 2, outcome="failed", reason="trainer exit 3")
    job = dataclasses.replace(job, status="failed", error="the trainer reported a failure")
    timeline = tuple(
        dataclasses.replace(e, kind="failed") if e.kind == "completed" else e for e in job.timeline
    )
    evidence.jobs["j_1"] = dataclasses.replace(job, timeline=timeline)
    evidence.ledger = []
    assert any("never fails by itself" in v for v in check(evidence).violations)
    exhausted = dataclasses.replace(
        evidence.jobs["j_1"], max_retries=1, error="worker w lost; no retries left (max_retries=1)"
    )
    evidence.jobs["j_1"] = exhausted
    assert check(evidence).violations == []
    evidence.jobs["j_1"] = dataclasses.replace(exhausted, error=None)
    assert any("failed without a recorded reason" in v for v in check(evidence).violations)


def test_an_undelivered_attempt_is_requeued_and_spends_no_retry() -> None:
    # Attempt 1's stream closed before it acknowledged, and it did not come back in time.
    evidence = clean()
    reason = "worker w_one's stream closed before it acknowledged the job"
    job = replace_attempt(evidence.jobs["j_1"], 1, outcome="undelivered", reason=reason)
    evidence.jobs["j_1"] = job
    assert check(evidence).violations == []
    # Failed after its last retry: with max_retries=0 that is attempt 2, not 1.
    failed = replace_attempt(job, 2, outcome="failed", reason="no retries left")
    failed = dataclasses.replace(
        failed,
        status="failed",
        max_retries=0,
        error="worker w_two lost; no retries left (max_retries=0)",
        timeline=tuple(
            dataclasses.replace(e, kind="failed") if e.kind == "completed" else e
            for e in job.timeline
        ),
    )
    evidence.jobs["j_1"] = failed
    evidence.ledger = [evidence.ledger[0]]
    assert check(evidence).violations == []
    lost = replace_attempt(failed, 1, outcome="lost")
    evidence.jobs["j_1"] = lost
    assert any("failed after 2 of 1 attempts" in v for v in check(evidence).violations)
    evidence.jobs["j_1"] = replace_attempt(job, 1, reason=None)
    assert any("without a recorded reason" in v for v in check(evidence).violations)


def test_a_preempted_attempt_is_requeued_spends_no_retry_and_has_its_own_entry() -> None:
    evidence = clean()
    job = replace_attempt(evidence.jobs["j_1"], 1, outcome="preempted", reason="make room")
    as_timeline = tuple(
        dataclasses.replace(e, kind="preempted") if e.kind == "requeued" else e
        for e in job.timeline
    )
    evidence.jobs["j_1"] = dataclasses.replace(job, timeline=as_timeline)
    assert check(evidence).violations == []
    # Its end is a 'preempted' timeline entry, not a 'requeued' one.
    evidence.jobs["j_1"] = job
    assert any("ended 'preempted'" in v for v in check(evidence).violations)
    # Failed after its only retry-spending attempt: max_retries=0 allows attempt 2.
    failed = dataclasses.replace(
        replace_attempt(job, 2, outcome="failed", reason="no retries left"),
        status="failed",
        max_retries=0,
        error="worker w_two lost; no retries left (max_retries=0)",
        timeline=tuple(
            dataclasses.replace(e, kind="failed") if e.kind == "completed" else e
            for e in as_timeline
        ),
    )
    evidence.jobs["j_1"] = failed
    evidence.ledger = [evidence.ledger[0]]
    assert check(evidence).violations == []


def never_acknowledged(job_id: str = "j_1", base: float = T0) -> JobView:
    """Dispatched to W1 at +1, +2, ... and never acknowledged: requeued (undelivered)
    until the bound-th dispatch fails it."""
    n = MAX_UNDELIVERED
    reason = f"worker {W1} did not acknowledge the dispatch within 60 s"
    history = tuple(
        AttemptView(
            k, W1, base + k, None, base + k + 0.5, "undelivered" if k < n else "failed", reason
        )
        for k in range(1, n + 1)
    )
    timeline = [TimelineEntry(base, "submitted", None, None)]
    for k in range(1, n + 1):
        timeline.append(TimelineEntry(base + k, "dispatched", W1, k))
        timeline.append(TimelineEntry(base + k + 0.5, "requeued" if k < n else "failed", W1, k))
    return JobView(
        job_id=job_id,
        status="failed",
        attempts=n,
        max_retries=0,
        worker_id=None,
        error=f"dispatched {n} times and never acknowledged (last: {reason}); check ...",
        history=history,
        timeline=tuple(timeline),
    )


def test_failed_at_the_bound_on_never_acknowledged_dispatches() -> None:
    job = never_acknowledged()
    evidence = Evidence(
        jobs={job.job_id: job},
        accepted={job.job_id},
        executions=[],
        ledger=[],
        killed_agent_pids=set(),
    )
    assert check(evidence).violations == []
    # One undelivered dispatch short of the bound: it should have been sent again.
    evidence.jobs["j_1"] = replace_attempt(job, 1, outcome="lost")
    assert any("failed after" in v for v in check(evidence).violations)
    evidence.jobs["j_1"] = dataclasses.replace(job, error="the trainer reported a failure")
    assert any("failed after" in v for v in check(evidence).violations)


def test_every_attempt_must_be_in_the_timeline() -> None:
    evidence = clean()
    job = evidence.jobs["j_1"]
    evidence.jobs["j_1"] = dataclasses.replace(
        job, timeline=tuple(e for e in job.timeline if e.kind != "requeued")
    )
    assert any("attempt 1 ended 'lost'" in v for v in check(evidence).violations)
    evidence.jobs["j_1"] = dataclasses.replace(
        job,
        timeline=tuple(e for e in job.timeline if not (e.kind == "dispatched" and e.attempt == 2)),
    )
    assert any("attempt 2 dispatch in the timeline" in v for v in check(evidence).violations)


def test_attempt_numbers_and_counter_agree() -> None:
    evidence = clean()
    evidence.jobs["j_1"] = dataclasses.replace(evidence.jobs["j_1"], attempts=3)
    assert any("attempts counter 3" in v for v in check(evidence).violations)


def test_a_job_left_pending_is_a_violation_only_once_the_fleet_settled() -> None:
    pending = JobView(
        "j_p", "pending", 0, 3, None, None, (), (TimelineEntry(T0, "submitted", None, None),)
    )
    evidence = Evidence({"j_p": pending}, {"j_p"}, [], [], set(), settled=False)
    assert check(evidence).violations == []
    evidence.settled = True
    assert any("still pending" in v for v in check(evidence).violations)


def test_an_attempt_that_never_ended() -> None:
    evidence = clean()
    evidence.jobs["j_1"] = replace_attempt(evidence.jobs["j_1"], 1, ended_at=None)
    assert any("attempt 1 never ended" in v for v in check(evidence).violations)


def test_agents_that_exited_by_themselves_are_reported() -> None:
    evidence = clean()
    evidence.agent_exits.append("agent chaos-1 exited by itself with code 1: boom")
    assert check(evidence).violations == ["agent chaos-1 exited by itself with code 1: boom"]


def test_a_given_up_attempt_sent_to_an_agent_launched_after() -> None:
    evidence = clean()  # attempt 1 on W1 (agent process 10) was given up at +5
    evidence.agents_launched_at[10] = T0 + 0.5
    assert check(evidence).violations == []
    evidence.agents_launched_at[10] = T0 + 5.5
    assert any("s after that, was sent it" in v for v in check(evidence).violations)


def test_a_fleet_that_never_came_to_rest() -> None:
    evidence = clean()
    evidence.unrest.append("worker chaos-2 is busy, connected True, holding j_9")
    assert check(evidence).violations == [
        "the healed fleet never came to rest: worker chaos-2 is busy, connected True, holding j_9"
    ]
