"""A state-machine test of fair share (issue 25): random teams, quotas, weights and
borrowing limits; jobs arriving and completing; workers joining and leaving; passes of
fair_plan.plan_fair() followed by FairShareState.reclaims(), and the preemption grace as
a step of its own (every victim being preempted stops and its job is queued again).

Invariants:
- no team holds more than its quota plus its borrowing limit;
- a reclaim preempts only another team's borrowing job, on a worker the waiting job fits,
  where that job's team is within its quota; never a job younger than the minimum
  runtime, and never the same job twice within that window;
- a team below its quota with a fitting waiting job gets GPUs within one pass plus the
  grace, unless another team's job within its quota took the capacity it could claim.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tunefleet.actors.fair_plan import plan_fair
from tunefleet.actors.fair_share import (
    QuotaBook,
    RunningJob,
    TeamQuota,
    Verdict,
    book_of,
    borrowing_jobs,
)
from tunefleet.actors.fair_share_state import FairShareSettings, FairShareState
from tunefleet.actors.matching import PendingJob, Requirements, WorkerView, unmet

TEAMS = ("a", "b", "c")
NAMES = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3")
MIN_RUNTIME = 5.0
GRACE = 1.0

quotas_strategy = st.fixed_dictionaries(
    {
        team: st.builds(
            TeamQuota,
            gpus=st.sampled_from([None, 0, 1, 2, 2, 3, 4, 6]),
            flavors=st.one_of(st.just({}), st.dictionaries(st.just("*A100*"), st.integers(0, 4))),
            weight=st.sampled_from([0.5, 1.0, 2.0]),
            borrow_limit=st.sampled_from([None, None, None, 0, 2, 4]),
        )
        for team in TEAMS
    }
)


class FairShareMachine(RuleBasedStateMachine):
    @initialize(quotas=quotas_strategy, by_priority=st.booleans())
    def start(self, quotas: dict[str, TeamQuota], by_priority: bool) -> None:
        # With priority preemption on, jobs come in two priorities and a team's urgent
        # job may preempt its own lower one; the liveness rule is then not asked.
        self.by_priority = by_priority
        self.fair = FairShareState(FairShareSettings(3600.0, MIN_RUNTIME, by_priority))
        self.fair.set_quotas(quotas)
        self.quotas = self.fair.quotas
        self.stopping: list[str] = []
        self.fair.preempter = lambda job_id, reason: self.stopping.append(job_id)
        self.workers: dict[str, WorkerView] = {}
        self.running: dict[str, RunningJob] = {}  # by worker
        self.pending: dict[str, PendingJob] = {}
        self.submitted: dict[str, PendingJob] = {}
        self.now = 1000.0
        self.seq = 0
        self.preempted_at: dict[str, list[float]] = {}

    # --- the world ---------------------------------------------------------------------

    @rule(gpus=st.sampled_from([1, 2, 2, 4]), name=st.sampled_from(NAMES))
    def join(self, gpus: int, name: str) -> None:
        self.seq += 1
        worker_id = f"w{self.seq}"
        self.workers[worker_id] = WorkerView(worker_id, gpu_count=gpus, gpu_name=name)

    @precondition(lambda self: self.workers)
    @rule(data=st.data())
    def lose(self, data: st.DataObject) -> None:
        worker_id = data.draw(st.sampled_from(sorted(self.workers)))
        del self.workers[worker_id]
        job = self.running.pop(worker_id, None)
        if job is not None:
            self._requeue(job)

    @rule(
        team=st.sampled_from(TEAMS),
        gpus=st.sampled_from([1, 1, 2]),
        gpu_name=st.sampled_from([None, None, "*A100*", "*H100*"]),
    )
    def arrive(self, team: str, gpus: int, gpu_name: str | None) -> None:
        self.seq += 1
        job_id = f"j{self.seq}"
        req = Requirements("worker", gpu_count=gpus, gpu_name=gpu_name)
        priority = self.seq % 3 if self.by_priority else 0
        self.pending[job_id] = PendingJob(job_id, priority, self.seq, req, team=team)
        self.submitted[job_id] = self.pending[job_id]

    @rule(team=st.sampled_from(TEAMS))
    def flood(self, team: str) -> None:
        """Several jobs of one team at once: it borrows whatever is idle."""
        for _ in range(4):
            self.arrive(team, 2, None)
        self._pass()

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        worker_id = data.draw(st.sampled_from(sorted(self.running)))
        del self.running[worker_id]

    @rule(seconds=st.sampled_from([1.0, 3.0, 10.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def one_pass(self) -> None:
        self._pass()

    @rule()
    def grace(self) -> None:
        """The preemption grace: every victim stops and its job queues again."""
        self.now += GRACE
        for job_id in self.stopping:
            worker_id = next((w for w, j in self.running.items() if j.job_id == job_id), None)
            if worker_id is not None:
                self._requeue(self.running.pop(worker_id))
        self.stopping.clear()

    @rule(data=st.data())
    def below_quota_gets_gpus_within_a_pass_and_the_grace(self, data: st.DataObject) -> None:
        waiting = [j for j in self.pending.values() if self._claimable(j)]
        if not waiting or self.by_priority:
            self._pass()
            return
        job = data.draw(st.sampled_from(waiting))
        before = self._book().used(job.team)
        self._pass()
        self.grace()
        self._pass()
        grew = self._book().used(job.team) > before
        event("below quota: got GPUs" if grew else "below quota: capacity taken by others")
        assert grew or job.job_id not in self.pending or not self._claimable(job), (
            f"team {job.team} below its quota waits with claimable capacity for {job.job_id}"
        )

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def no_team_past_quota_plus_borrowing_limit(self) -> None:
        book = self._book()
        for team, quota in self.quotas.items():
            if quota.borrow_limit is not None:
                assert book.borrowed(team) <= quota.borrow_limit, (team, book.use)

    # --- the model's pass ------------------------------------------------------------------

    def _pass(self) -> None:
        running = list(self.running.values())
        standing = self.fair.observe(running, self.now)
        book = book_of(self.quotas, running)
        idle = [w for w_id, w in self.workers.items() if w_id not in self.running]
        for job_id, worker_id in plan_fair(list(self.pending.values()), idle, book, standing):
            job = self.pending.pop(job_id)
            worker = self.workers[worker_id]
            assert unmet(job.requirements, worker) is None
            self.running[worker_id] = RunningJob(
                job_id,
                job.team,
                job.priority,
                job.requirements.gpu_count,
                worker_id,
                worker.gpu_name,
                self.now,
            )
        running = list(self.running.values())
        borrowers = borrowing_jobs(self.quotas, running)
        check = book_of(self.quotas, running)
        by_id = {j.job_id: j for j in running}
        waiting = sorted(
            self.pending.values(), key=lambda j: (-j.priority, standing.get(j.team, 0.0), j.seq)
        )
        for decision in self.fair.reclaims(waiting, running, book, self.workers, self.now):
            victim = by_id[decision.victim]
            job = self.pending[decision.job_id]
            assert unmet(job.requirements, self.workers[victim.worker_id]) is None
            gpus = job.requirements.gpu_count
            if victim.team == job.team:  # only with priority preemption, only a lower one
                assert self.by_priority and victim.priority < job.priority
            else:
                assert victim.job_id in borrowers
                assert check.verdict(job.team, victim.gpu_name, gpus) is Verdict.WITHIN
            check.add(victim.team, victim.gpu_name, -victim.gpus)
            check.add(job.team, victim.gpu_name, gpus)
            assert self.now - victim.since >= MIN_RUNTIME
            times = self.preempted_at.setdefault(victim.job_id, [])
            assert all(self.now - at >= MIN_RUNTIME for at in times), (victim.job_id, times)
            times.append(self.now)
            event("a reclaim")
            self.fair.started(decision, self.now)

    def _requeue(self, job: RunningJob) -> None:
        self.pending[job.job_id] = self.submitted[job.job_id]  # its place kept

    def _book(self) -> QuotaBook:
        return book_of(self.quotas, self.running.values())

    def _claimable(self, job: PendingJob) -> bool:
        """Its team is within quota on some worker it fits that is idle, or held by an
        unprotected borrowing job of another team not being preempted already."""
        running = list(self.running.values())
        book = book_of(self.quotas, running)
        quota = book.quota(job.team)
        if not quota.has_quota or book.borrowed(job.team) > 0:
            return False
        borrowers = borrowing_jobs(self.quotas, running)
        held = {j.worker_id: j for j in running}
        for worker_id, worker in self.workers.items():
            if unmet(job.requirements, worker) is not None:
                continue
            if book.verdict(job.team, worker.gpu_name, job.requirements.gpu_count) is not (
                Verdict.WITHIN
            ):
                continue
            other = held.get(worker_id)
            if other is None:
                return True
            if (
                other.team != job.team
                and other.job_id in borrowers
                and other.job_id not in self.fair.inflight
                and self.now - other.since >= MIN_RUNTIME
                and self.now - self.fair.last_preempted.get(other.job_id, -1e9) >= MIN_RUNTIME
            ):
                return True
        return False


# Bounded in examples, not time; a loaded machine may need more than the default 120 s.
pytestmark = pytest.mark.timeout(600)

FairShareMachine.TestCase.settings = settings(
    max_examples=400,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestFairShareMachine = FairShareMachine.TestCase
