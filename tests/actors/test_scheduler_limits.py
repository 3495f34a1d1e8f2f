"""The scheduler under concurrency limits, in process: random submits, dispatches taken
late, completions, failures (some retried) and limit changes. No dispatch ever exceeds
a limit in force, and while a worker is free no pending job waits unless a limit holds
it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tunefleet.actors import messages as m
from tunefleet.actors.build import build_fleet
from tunefleet.actors.clock import FakeClock
from tunefleet.actors.context import FleetContext, FleetSettings
from tunefleet.actors.matching import PendingJob, Requirements, WorkerView
from tunefleet.actors.runtime import ActorSystem
from tunefleet.actors.scheduler import Scheduler
from tunefleet.actors.tenancy_limits import (
    ConcurrencyLimits,
    Holder,
    TeamLimits,
    Usage,
    hold_reason,
    usage_of,
)
from tunefleet.audit import AuditLog
from tunefleet.fsm.job import JobState
from tunefleet.storage.memory import memory_store

USERS = ["ann", "bob", "cy"]
TEAMS = ["nlp", "vision", None]
limit_values = st.one_of(st.none(), st.integers(min_value=0, max_value=4))
limit_sets = st.builds(
    ConcurrencyLimits,
    max_concurrent=limit_values,
    user_max_concurrent=limit_values,
    teams=st.dictionaries(
        st.sampled_from(["nlp", "vision"]),
        st.builds(TeamLimits, max_jobs=limit_values, max_gpus=limit_values),
        max_size=2,
    ),
)


@dataclass
class Rec:
    user_name: str | None
    team_name: str | None
    gpu_count: int


@dataclass
class FakeJob:
    """A job actor as the scheduler sees it: a state, a record, and dispatches told."""

    machine: LimitsMachine
    job_id: str
    rec: Rec
    state: str = JobState.PENDING
    worker_id: str | None = None
    offered: list[str] = field(default_factory=list)

    def try_tell(self, message: object) -> bool:
        assert isinstance(message, m.DispatchTo)
        self.machine.check_dispatch(self)
        self.offered.append(message.worker_id)
        self.worker_id = message.worker_id
        return True

    def holder(self) -> Holder:
        return Holder(self.rec.user_name, self.rec.team_name, self.rec.gpu_count)


class LimitsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.jobs: dict[str, FakeJob] = {}
        self.system = ActorSystem(FakeClock())
        self.scheduler = Scheduler(cast(FleetContext, self))
        self.next_id = 0
        self.workers: list[str] = []
        self.loop.run_until_complete(self._spawn())

    async def _spawn(self) -> None:
        self.system.spawn(self.scheduler)

    def teardown(self) -> None:
        self.loop.run_until_complete(self.system.stop_all(drain=False))
        self.loop.close()

    def _holding(self) -> list[FakeJob]:
        """Jobs holding a worker: offered one (taken or not yet) or running."""
        return [job for job in self.jobs.values() if job.worker_id is not None]

    def check_dispatch(self, job: FakeJob) -> None:
        assert job.worker_id is None, "a job holding a worker was offered another"
        limits = self.scheduler.limits
        before = usage_of(h.holder() for h in self._holding())
        assert hold_reason(limits, before, job.holder()) is None, (
            f"dispatched {job.job_id} past a limit: {hold_reason(limits, before, job.holder())}"
        )

    def _send(self, *messages: object) -> None:
        self.loop.run_until_complete(self._tell_then_settle(messages))

    async def _tell_then_settle(self, messages: tuple[object, ...]) -> None:
        for message in messages:
            self.scheduler.tell(message)
        # An ask runs the pass owed first; the answer comes once every tell before it ran.
        await self.scheduler.ask(m.QueuePlace("none"))

    @rule(user=st.sampled_from(USERS), team=st.sampled_from(TEAMS), gpus=st.integers(0, 3))
    def submit(self, user: str, team: str | None, gpus: int) -> None:
        self.next_id += 1
        job = FakeJob(self, f"j_{self.next_id}", Rec(user, team, gpus))
        self.jobs[job.job_id] = job
        self._send(m.JobWaiting(self._view(job)))

    def _view(self, job: FakeJob) -> PendingJob:
        return PendingJob(
            job.job_id,
            0,
            int(job.job_id[2:]),
            Requirements("worker", gpu_count=job.rec.gpu_count),
            user=job.rec.user_name,
            team=job.rec.team_name,
        )

    @precondition(lambda self: len(self.workers) < 8)
    @rule()
    def add_worker(self) -> None:
        worker_id = f"w_{len(self.workers)}"
        self.workers.append(worker_id)
        self._free(worker_id)

    def _free(self, worker_id: str) -> None:
        view = WorkerView(worker_id, gpu_count=4)
        self._send(m.WorkerChanged(worker_id, view, schedulable=True))

    @rule(data=st.data())
    def take_a_dispatch(self, data: st.DataObject) -> None:
        offered = [j for j in self.jobs.values() if j.worker_id and j.state == JobState.PENDING]
        if offered:
            job = data.draw(st.sampled_from(offered))
            job.state = data.draw(st.sampled_from([JobState.DISPATCHED, JobState.RUNNING]))

    @rule(data=st.data(), retried=st.booleans())
    def end_a_job(self, data: st.DataObject, retried: bool) -> None:
        """It completes or fails (maybe before it took its dispatch): its worker is free;
        a failure with retries left waits again."""
        holding = self._holding()
        if not holding:
            return
        job = data.draw(st.sampled_from(holding))
        worker_id = job.worker_id
        assert worker_id is not None
        job.worker_id = None
        if retried:
            job.state = JobState.PENDING
            self._send(m.JobWaiting(self._view(job)))
        else:
            del self.jobs[job.job_id]
        self._free(worker_id)

    @rule(limits=limit_sets)
    def change_limits(self, limits: ConcurrencyLimits) -> None:
        self._send(m.SetConcurrencyLimits(limits))

    @invariant()
    def no_pending_job_waits_unheld_while_a_worker_is_free(self) -> None:
        if not self.scheduler.idle:
            return
        usage = self._usage_now()
        for pending in self.scheduler.pending.values():
            reason = hold_reason(self.scheduler.limits, usage, pending.holder())
            assert reason is not None, f"{pending.job_id} waits with a worker free and no limit"

    @invariant()
    def the_scheduler_counts_what_the_jobs_hold(self) -> None:
        if self.scheduler.limits.unlimited:
            return
        assert self.scheduler.usage() == self._usage_now()

    def _usage_now(self) -> Usage:
        return usage_of(job.holder() for job in self._holding())


LimitsMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestSchedulerUnderLimits = LimitsMachine.TestCase


def test_a_fleet_started_with_stored_limits_goes_by_them_at_once(tmp_path: Path) -> None:
    """The stored limits are read before the fleet starts (http/app.py), so the pass over
    the restored queue already goes by them."""

    async def scenario() -> ConcurrencyLimits:
        store = memory_store()
        await store.limits.set_fleet_limits(2, 1)
        audit = AuditLog(store.append_audit, tmp_path / "audit.jsonl", FakeClock())
        fleet = build_fleet(store, FakeClock(), FleetSettings(local_runner=False), audit)
        fleet.limits = await store.limits.limits()
        await fleet.start()
        try:
            return fleet.ctx.scheduler.limits
        finally:
            await fleet.stop()
            await audit.close()

    assert asyncio.run(scenario()) == ConcurrencyLimits(2, 1)
