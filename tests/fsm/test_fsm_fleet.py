"""Both lifecycles coupled the way the actors couple them: random fleets of jobs and
workers, with the cross-entity invariants the scheduler and supervisor rely on."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tunefleet.fsm import (
    JOB_LIFECYCLE,
    TERMINAL_JOB_STATES,
    WORKER_LIFECYCLE,
    IllegalTransition,
    JobFsmMixin,
    WorkerFsmMixin,
)

LIVE_JOB_STATES = {"pending", "dispatched", "running"}
MAX_JOBS = 8


class Worker(WorkerFsmMixin):
    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.state = "connecting"
        self.drain_requested = False
        self.current_job_id: str | None = None


class Job(JobFsmMixin):
    def __init__(self, job_id: str, max_retries: int) -> None:
        self.job_id = job_id
        self.state = "pending"
        self.attempts = 0
        self.max_retries = max_retries
        self.worker_id: str | None = None


class Fleet(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.workers: dict[str, Worker] = {}
        self.jobs: dict[str, Job] = {}
        self.drain_expected: dict[str, bool] = {}
        self.ended: dict[str, str] = {}  # job id -> the terminal state it reached

    @initialize(connected=st.lists(st.booleans(), min_size=1, max_size=4))
    def create_workers(self, connected: list[bool]) -> None:
        for n, registers in enumerate(connected):
            worker = self.workers[f"w_{n}"] = Worker(f"w_{n}")
            self.drain_expected[worker.worker_id] = False
            if registers:
                WORKER_LIFECYCLE.fire(worker, "register")

    @initialize(retries=st.lists(st.integers(min_value=0, max_value=2), max_size=4))
    def submit_jobs(self, retries: list[int]) -> None:
        for max_retries in retries:
            self.submit(max_retries)

    # --- what the actors do -------------------------------------------------------------

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(max_retries=st.integers(min_value=0, max_value=2))
    def submit(self, max_retries: int) -> None:
        job_id = f"j_{len(self.jobs)}"
        self.jobs[job_id] = Job(job_id, max_retries)

    def _placements(self) -> list[tuple[Job, Worker]]:
        idle = [w for w in self.workers.values() if w.state == "idle" and not w.drain_requested]
        return [(j, w) for j in self._jobs_in("pending") for w in idle]

    @precondition(lambda self: bool(self._placements()))
    @rule(data=st.data())
    def assign(self, data: st.DataObject) -> None:
        job, worker = data.draw(st.sampled_from(self._placements()))
        WORKER_LIFECYCLE.fire(worker, "assign")
        JOB_LIFECYCLE.fire(job, "dispatch")
        worker.current_job_id, job.worker_id = job.job_id, worker.worker_id

    @precondition(lambda self: bool(self._jobs_in("dispatched")))
    @rule(data=st.data())
    def acknowledge(self, data: st.DataObject) -> None:
        JOB_LIFECYCLE.fire(data.draw(st.sampled_from(self._jobs_in("dispatched"))), "start")

    @precondition(lambda self: bool(self._jobs_in("running")))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        self._end(data.draw(st.sampled_from(self._jobs_in("running"))), "complete")

    @precondition(lambda self: bool(self._jobs_in("dispatched", "running")))
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        # The worker reports a failure, or the run times out.
        self._end(data.draw(st.sampled_from(self._jobs_in("dispatched", "running"))), "fail")

    @precondition(lambda self: bool(self._jobs_in(*LIVE_JOB_STATES)))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        self._end(data.draw(st.sampled_from(self._jobs_in(*LIVE_JOB_STATES))), "cancel")

    def _end(self, job: Job, event: str) -> None:
        JOB_LIFECYCLE.fire(job, event)
        self.ended[job.job_id] = job.state
        if job.worker_id is not None:
            worker = self.workers[job.worker_id]
            worker.current_job_id, job.worker_id = None, None
            WORKER_LIFECYCLE.fire(worker, "release")

    @precondition(lambda self: bool(self._workers_not("offline")))
    @rule(data=st.data())
    def lose_worker(self, data: st.DataObject) -> None:
        self._lose(data.draw(st.sampled_from(self._workers_not("offline"))))

    @precondition(lambda self: bool(self._workers_with_a_job()))
    @rule(data=st.data())
    def lose_a_worker_running_a_job(self, data: st.DataObject) -> None:
        # The interesting loss, given its own rule so that retries do run out.
        self._lose(data.draw(st.sampled_from(self._workers_with_a_job())))

    def _lose(self, worker: Worker) -> None:
        WORKER_LIFECYCLE.fire(worker, "lose")
        if worker.current_job_id is not None:
            job = self.jobs[worker.current_job_id]
            worker.current_job_id, job.worker_id = None, None
            if JOB_LIFECYCLE.fire(job, "lose") in TERMINAL_JOB_STATES:
                self.ended[job.job_id] = job.state

    @rule(data=st.data())
    def register(self, data: st.DataObject) -> None:
        # An online worker re-registering still runs the job it had.
        WORKER_LIFECYCLE.fire(self._any_worker(data), "register")

    @rule(data=st.data(), action=st.sampled_from(["drain", "resume"]))
    def admin(self, data: st.DataObject, action: str) -> None:
        worker = self._any_worker(data)
        if action == "resume" and worker.state in ("idle", "busy"):
            with pytest.raises(IllegalTransition):
                WORKER_LIFECYCLE.fire(worker, "resume")
            return
        WORKER_LIFECYCLE.fire(worker, action)
        self.drain_expected[worker.worker_id] = action == "drain"

    @rule(data=st.data())
    def refused_events_change_nothing(self, data: st.DataObject) -> None:
        refused = [
            (lifecycle, entity, event)
            for lifecycle, entities in (
                (JOB_LIFECYCLE, self.jobs.values()),
                (WORKER_LIFECYCLE, self.workers.values()),
            )
            for entity in entities
            for event in sorted(lifecycle.machine.events)
            if not lifecycle.can_fire(entity, event)
        ]
        if not refused:
            return
        lifecycle, entity, event = data.draw(st.sampled_from(refused))
        before = dict(vars(entity))
        with pytest.raises(IllegalTransition):
            lifecycle.fire(entity, event)
        assert vars(entity) == before

    # --- helpers ---------------------------------------------------------------------

    def _jobs_in(self, *states: str) -> list[Job]:
        return [job for job in self.jobs.values() if job.state in states]

    def _workers_not(self, state: str) -> list[Worker]:
        return [worker for worker in self.workers.values() if worker.state != state]

    def _workers_with_a_job(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.current_job_id is not None]

    def _any_worker(self, data: st.DataObject) -> Worker:
        return data.draw(st.sampled_from(list(self.workers.values())))

    # --- invariants --------------------------------------------------------------------

    @invariant()
    def a_placed_job_is_on_exactly_one_worker_that_names_it_back(self) -> None:
        for job in self.jobs.values():
            holders = [w for w in self.workers.values() if w.current_job_id == job.job_id]
            if job.state in ("dispatched", "running"):
                assert job.worker_id is not None
                assert [w.worker_id for w in holders] == [job.worker_id]
                assert holders[0].state in ("busy", "draining")
            else:
                assert job.worker_id is None and holders == []

    @invariant()
    def a_worker_holds_a_job_exactly_when_its_state_says(self) -> None:
        for worker in self.workers.values():
            if worker.state == "busy":
                assert worker.current_job_id is not None
            if worker.state in ("idle", "offline", "connecting"):
                assert worker.current_job_id is None
            if worker.current_job_id is not None:
                job = self.jobs[worker.current_job_id]
                assert job.worker_id == worker.worker_id
                assert job.state in ("dispatched", "running")

    @invariant()
    def drain_sticks_across_lose_and_register_until_resume(self) -> None:
        for worker in self.workers.values():
            assert worker.drain_requested == self.drain_expected[worker.worker_id]
            if worker.state == "draining":
                assert worker.drain_requested
            if worker.state in ("idle", "busy"):
                assert not worker.drain_requested

    @invariant()
    def every_job_is_live_or_in_the_one_terminal_state_it_reached(self) -> None:
        for job in self.jobs.values():
            assert (job.state in LIVE_JOB_STATES) != (job.state in TERMINAL_JOB_STATES)
            assert (job.job_id in self.ended) == (job.state in TERMINAL_JOB_STATES)
            if job.job_id in self.ended:
                assert job.state == self.ended[job.job_id]

    @invariant()
    def attempts_never_exceed_the_retry_policy(self) -> None:
        for job in self.jobs.values():
            assert 0 <= job.attempts <= job.max_retries + 1


TestFleet = Fleet.TestCase
TestFleet.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
