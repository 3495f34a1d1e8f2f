"""Retry and quarantine decisions over random failure sequences and random fleets.

The pieces the orchestrator runs, without actors: the job and worker lifecycle tables
(their budgets and the assign guard), retry_policy (poison, avoided workers),
quarantine_policy, failure_kinds, and matching.plan with the exclusion the scheduler
sets (a retry keeps off the workers it failed on while another fits).

Invariants (issue 26):
- a job never fails for infrastructure reasons while its infra budget and a healthy
  fitting worker remain;
- a poison job ends after at most two attempts;
- no job is dispatched to a quarantined worker, and a broken worker fails at most
  ``after`` jobs before it is quarantined.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tunefleet.actors.matching import PendingJob, Requirements, WorkerView, plan
from tunefleet.actors.quarantine_policy import (
    AttemptEnd,
    QuarantineRule,
    quarantine_reason,
    remember,
)
from tunefleet.actors.retry_policy import (
    PastFailure,
    avoided_workers,
    exclusion,
    poison_verdict,
    shunned_workers,
)
from tunefleet.fsm import JOB_LIFECYCLE, WORKER_LIFECYCLE, JobFsmMixin, JobState, WorkerFsmMixin
from tunefleet.fsm.failure_kinds import Evidence, FailureKind, classify_failure

ATTEMPT_S = 60.0
ANY = Requirements("worker", gpu_count=0)


class Job(JobFsmMixin):
    def __init__(self, job_id: str, max_retries: int, infra_retries: int) -> None:
        self.job_id = job_id
        self.state = JobState.PENDING
        self.attempts = 0
        self.max_retries = max_retries
        self.infra_retries = infra_retries
        self.infra_failures = 0
        self.undelivered = 0
        self.failures: list[PastFailure] = []
        self.ran_on: list[str] = []
        self.error: str | None = None
        self.last_kind: FailureKind | None = None


@dataclass
class Worker(WorkerFsmMixin):
    worker_id: str
    broken: bool
    state: str = "idle"
    drain_requested: bool = False
    current_job_id: str | None = None
    quarantined: bool = False
    ends: tuple[AttemptEnd, ...] = ()
    succeeded_elsewhere: set[str] = field(default_factory=set)
    ran: int = 0


@dataclass
class Scenario:
    healthy: int
    broken: int
    jobs: list[str]  # "ok" or "poison" per job
    max_retries: int
    infra_retries: int
    after: int
    transient_infra: bool
    flaky_errors: bool


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    return Scenario(
        healthy=draw(st.integers(0, 4)),
        broken=draw(st.integers(0, 3)),
        jobs=draw(st.lists(st.sampled_from(["ok", "ok", "poison"]), min_size=1, max_size=12)),
        max_retries=draw(st.integers(0, 3)),
        infra_retries=draw(st.integers(0, 5)),
        after=draw(st.integers(1, 4)),
        transient_infra=draw(st.booleans()),
        flaky_errors=draw(st.booleans()),
    )


def _outcome(worker: Worker, kind: str, data: st.DataObject, sc: Scenario) -> tuple[str, str]:
    """(status, error) of one attempt, as an agent would report it."""
    if worker.broken:
        return "failed", "exit code 1: RuntimeError: CUDA error: unspecified launch failure"
    if sc.transient_infra and data.draw(st.integers(0, 9), label="transient") == 0:
        return "failed", "exit code 1: OSError: [Errno 28] No space left on device"
    if kind == "poison":
        return "failed", "exit code 1: ValueError: expected 4 channels, got 3"
    if sc.flaky_errors and data.draw(st.integers(0, 4), label="flaky") == 0:
        n = data.draw(st.integers(0, 3), label="which error")
        return "failed", f"exit code 1: KeyError: 'key{n}x'"
    return "completed", ""


def _dispatch_target(job: Job, fleet: list[Worker]) -> str | None:
    """What the scheduler would choose: plan() over schedulable workers, with the job
    excluding where it failed while another non-quarantined worker fits."""
    avoid, shun = avoided_workers(job.failures), shunned_workers(job.failures)

    def fits_outside(kept_off: frozenset[str]) -> bool:
        return any(not w.quarantined and w.worker_id not in kept_off for w in fleet)

    excluded = exclusion(avoid, shun, fits_outside)
    pending = PendingJob(job.job_id, 0, 1, ANY, avoid=avoid, shun=shun, exclude=excluded)
    idle = [WorkerView(w.worker_id) for w in fleet if WORKER_LIFECYCLE.can_fire(w, "assign")]
    placed = plan([pending], idle)
    return placed[0][1] if placed else None


def _run(sc: Scenario, data: st.DataObject) -> tuple[list[Job], list[Worker]]:
    fleet = [Worker(f"w_ok{i}", False) for i in range(sc.healthy)]
    fleet += [Worker(f"w_bad{i}", True) for i in range(sc.broken)]
    rule = QuarantineRule(after=sc.after, within_s=3600.0)
    now = 0.0
    jobs: list[Job] = []
    for n, kind in enumerate(sc.jobs):
        job = Job(f"j_{n}", sc.max_retries, sc.infra_retries)
        jobs.append(job)
        while job.state == JobState.PENDING:
            target = _dispatch_target(job, fleet)
            if target is None:
                break  # waits for a worker: it never fails for that
            worker = next(w for w in fleet if w.worker_id == target)
            assert not worker.quarantined, "no job is dispatched to a quarantined worker"
            WORKER_LIFECYCLE.fire(worker, "assign")
            JOB_LIFECYCLE.fire(job, "dispatch")
            JOB_LIFECYCLE.fire(job, "start")
            worker.ran += 1
            job.ran_on.append(worker.worker_id)
            now += ATTEMPT_S
            status, error = _outcome(worker, kind, data, sc)
            WORKER_LIFECYCLE.fire(worker, "release")
            if status == "completed":
                JOB_LIFECYCLE.fire(job, "complete")
                worker.ends = remember(worker.ends, AttemptEnd(now, job.job_id, None))
                for past in job.failures:
                    if past.kind == FailureKind.JOB_ERROR and past.worker_id != worker.worker_id:
                        other = next(w for w in fleet if w.worker_id == past.worker_id)
                        other.succeeded_elsewhere.add(job.job_id)
            else:
                ended = classify_failure(error, Evidence())
                failure = PastFailure(worker.worker_id, ended.kind, ended.signature)
                poison = poison_verdict(job.failures, failure)
                job.failures.append(failure)
                job.last_kind = ended.kind
                worker.ends = remember(
                    worker.ends, AttemptEnd(now, job.job_id, ended.kind, ended.signature)
                )
                if poison is not None:
                    JOB_LIFECYCLE.fire(job, "fail")
                    job.error = poison
                else:
                    if ended.kind == FailureKind.INFRASTRUCTURE:
                        job.infra_failures += 1
                    JOB_LIFECYCLE.fire(job, "lose")
            for w in fleet:
                reason = quarantine_reason(w.ends, w.succeeded_elsewhere, now, rule)
                if reason is not None and not w.quarantined:
                    WORKER_LIFECYCLE.fire(w, "quarantine")
    return jobs, fleet


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.data())
def test_retry_and_quarantine_decisions_keep_their_promises(
    sc: Scenario, data: st.DataObject
) -> None:
    jobs, fleet = _run(sc, data)
    for job in jobs:
        assert job.state in (JobState.PENDING, JobState.COMPLETED, JobState.FAILED)
        infra = sum(f.kind == FailureKind.INFRASTRUCTURE for f in job.failures)
        errors = [f for f in job.failures if f.kind == FailureKind.JOB_ERROR]
        # Budgets as the tables keep them: retries for job errors, their own for infra.
        assert len(errors) <= job.max_retries + 1
        assert infra <= job.infra_retries + 1
        if job.state == JobState.FAILED and job.last_kind == FailureKind.INFRASTRUCTURE:
            # Only once its own budget is spent ...
            assert infra == job.infra_retries + 1
            # ... which the broken workers alone cannot do while a healthy one remains:
            # a retry never goes back to a worker it failed on while another fits.
            if sc.healthy and not sc.transient_infra:
                assert sc.broken > job.infra_retries
        # A poison job ends after at most two attempts that reached a healthy worker
        # (two healthy workers, no other noise: else it may meet its error twice on one).
        if not sc.flaky_errors and not sc.transient_infra and sc.healthy >= 2:
            healthy_runs = [w for w in job.ran_on if w.startswith("w_ok")]
            assert len(healthy_runs) <= 2
            if job.error is not None and job.error.startswith("failed the same way"):
                assert len(errors) == 2
    for worker in fleet:
        if worker.broken:
            # A black hole swallows at most `after` jobs before its quarantine.
            assert worker.ran <= sc.after
            assert worker.quarantined or worker.ran < sc.after
