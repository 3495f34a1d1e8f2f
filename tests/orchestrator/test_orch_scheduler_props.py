"""Property test of scheduling through the real actors: random fleets (labels, GPU
counts and VRAM, some draining) and random job mixes submitted through Fleet.submit,
with random acknowledgements, completions, failures, agents stopping jobs on their own,
approvals and rejections of jobs held at submit (never dispatched while held),
cancels, preemptions (the agent confirms the stop), losses and returns, GPU health
readings that make a worker unhealthy (an Xid: it is quarantined) or well again (it
stays quarantined), and admins releasing quarantined workers.

After every step the fleet settles, and then:
- every job_submit an agent got satisfies the job's requirements (unmet is None), went
  to a worker that was not draining, not quarantined and held no job, and no other
  agent holds that job;
- the actors agree: a dispatched or running job names a worker that names it back, and
  no worker holds two jobs;
- a job placed in this step outranks every job still pending that that worker would
  also have fitted (priority, then preempted ones first, then submission order);
- no pending job fits a worker that is free to take it (the loop settled);
- a job is stored already dispatched by its submit alone (one commit, before any
  pending job is considered) exactly when a free worker fits it as it is submitted.
At the end, a job's attempts less its preempted, undelivered, infrastructure and
worker_shutdown ones are within max_retries + 1: none of those counts as a retry.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from orchestrator_testkit import FakeAgent, FleetHarness, SettlingClock, gpu_report, job_record

from tunefleet.actors import messages as m
from tunefleet.actors.context import FleetSettings
from tunefleet.actors.matching import Requirements, unmet
from tunefleet.actors.preemption import HEAD_OF_BAND, NotPreemptible
from tunefleet.actors.records import JobRecord
from tunefleet.fsm.failure_kinds import INFRA_BUDGET_KINDS
from tunefleet.fsm.job import JobState
from tunefleet.gpu_health import GpuReading, HealthSample

GPUS = [("NVIDIA A100-SXM4-80GB", 80.0), ("NVIDIA H100 80GB HBM3", 80.0), ("NVIDIA A10", 24.0)]
GPU_TYPES = ["a100", "h100", "a10"]
LABEL_PATTERNS = ["a100", "h*", "a1*", "*"]
NAME_PATTERNS = ["*A100*", "*H100*", "NVIDIA A10"]
ACTIONS = [
    "submit",
    "approve",
    "reject",
    "ack",
    "complete",
    "fail",
    "stop",
    "cancel",
    "preempt",
    "lose",
    "return",
    "drain",
    "resume",
    "sicken",
    "heal",
    "release",
]
SICK = HealthSample(gpus=(GpuReading(index=0, xids=(79,)),), missing=())
WELL = HealthSample(gpus=(GpuReading(index=0, xids=()),), missing=())
# Fast fsyncs where the machine has a RAM disk; it is still a real SQLite file.
_RAM_DISK = Path("/dev/shm")


@dataclass(frozen=True)
class WorkerSpec:
    gpu: int  # index into GPUS
    gpu_count: int
    gpu_type: str | None
    draining: bool


@dataclass(frozen=True)
class JobSpec:
    gpu_count: int
    label: str | None
    min_vram_gb: float | None
    gpu_name: str | None
    priority: int
    max_retries: int
    held: bool  # an approval rule holds it at submit


workers_st = st.builds(
    WorkerSpec,
    gpu=st.integers(0, len(GPUS) - 1),
    gpu_count=st.sampled_from([1, 2, 4, 8]),
    gpu_type=st.one_of(st.none(), st.sampled_from(GPU_TYPES)),
    draining=st.sampled_from([False, False, True]),
)
jobs_st = st.builds(
    JobSpec,
    gpu_count=st.sampled_from([0, 1, 1, 2, 4, 8]),
    label=st.one_of(st.none(), st.sampled_from(LABEL_PATTERNS)),
    min_vram_gb=st.one_of(st.none(), st.sampled_from([20.0, 40.0, 80.0])),
    gpu_name=st.one_of(st.none(), st.none(), st.sampled_from(NAME_PATTERNS)),
    priority=st.integers(0, 3),
    max_retries=st.integers(0, 2),
    held=st.sampled_from([False, False, True]),
)
steps_st = st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 1000)), max_size=30)


@dataclass
class Sim:
    """The agents' side of the world, and what the orchestrator told them."""

    harness: FleetHarness
    agents: list[FakeAgent]
    holding: dict[str, str | None] = field(default_factory=dict)  # worker → job it runs
    acked: set[str] = field(default_factory=set)
    online: dict[str, bool] = field(default_factory=dict)
    requirements: dict[str, Requirements] = field(default_factory=dict)
    rank: dict[str, tuple[int, int]] = field(default_factory=dict)  # job → (-priority, seq)
    placed_now: list[tuple[str, str]] = field(default_factory=list)
    stored_dispatched: list[str] = field(default_factory=list)  # placed before 1st write
    held: set[str] = field(default_factory=set)  # awaiting approval: never dispatched
    preempted: set[str] = field(default_factory=set)  # waiting at the head of their band
    placed_rank: dict[str, tuple[int, int]] = field(default_factory=dict)

    sick: set[str] = field(default_factory=set)  # workers whose last reading is unhealthy
    quarantined: set[str] = field(default_factory=set)  # by a reading that turned unhealthy

    def rank_of(self, job_id: str) -> tuple[int, int]:
        priority, seq = self.rank[job_id]
        return (priority, seq - HEAD_OF_BAND) if job_id in self.preempted else (priority, seq)

    def pick(self, items: list[FakeAgent], n: int) -> FakeAgent | None:
        return items[n % len(items)] if items else None

    def holders(self) -> list[FakeAgent]:
        return [a for a in self.agents if self.holding[a.worker_id] is not None]


async def _observe(sim: Sim) -> None:
    """Read every stream; agents confirm cancels, as a real agent would."""
    h = sim.harness
    for _ in range(10):  # bounded: confirmations may lead to more events
        confirmed = False
        for agent in sim.agents:
            for event in agent.read():
                job_id = str(event.data.get("job_id") or "")
                if event.type == "job_submit":
                    _check_dispatch(sim, agent, job_id)
                elif event.type == "job_cancel" and sim.holding[agent.worker_id] == job_id:
                    sim.holding[agent.worker_id] = None
                    await agent.report(job_id, "cancelled")
                    confirmed = True
        if not confirmed:
            break
        await h.settle()


def _check_dispatch(sim: Sim, agent: FakeAgent, job_id: str) -> None:
    worker = sim.harness.worker(agent.worker_id)
    assert job_id not in sim.held, f"{job_id} was dispatched while awaiting approval"
    assert sim.holding[agent.worker_id] is None, "a job_submit reached a worker holding a job"
    others = [w for w, j in sim.holding.items() if j == job_id]
    assert not others, f"job {job_id} is on {others} and was given to {agent.worker_id}"
    problem = unmet(sim.requirements[job_id], worker.view())
    assert problem is None, f"{job_id} went to {agent.worker_id}, which {problem}"
    assert not worker.drain_requested, "a draining worker got a job"
    assert agent.worker_id not in sim.quarantined, f"quarantined {agent.worker_id} got {job_id}"
    assert not worker.quarantined, f"quarantined {agent.worker_id} got {job_id}"
    sim.holding[agent.worker_id] = job_id
    sim.placed_now.append((job_id, agent.worker_id))
    sim.placed_rank[job_id] = sim.rank_of(job_id)  # where it waited: then it leaves the head
    sim.preempted.discard(job_id)


def _check_actors(sim: Sim) -> None:
    ctx = sim.harness.ctx
    holders: dict[str, str] = {}
    for job in ctx.jobs.values():
        if job.state in (JobState.DISPATCHED, JobState.RUNNING):
            assert job.worker_id is not None
            assert job.worker_id not in holders, f"{job.worker_id} holds two jobs"
            holders[job.worker_id] = job.job_id
            assert ctx.workers[job.worker_id].current_job_id == job.job_id
    for worker in ctx.workers.values():
        if worker.current_job_id is not None:
            assert holders.get(worker.worker_id) == worker.current_job_id
    pending = [j for j in ctx.jobs.values() if j.state == JobState.PENDING]
    for job in pending:
        for worker in ctx.workers.values():
            if worker.schedulable:
                assert unmet(job.rec.requirements(), worker.view()) is not None, (
                    f"{job.job_id} waits while {worker.worker_id} is free and fits it"
                )
    for placed, worker_id in sim.placed_now:
        view = ctx.workers[worker_id].view()
        for job in pending:
            if unmet(job.rec.requirements(), view) is None:
                assert sim.rank_of(job.job_id) > sim.placed_rank[placed], (
                    f"{placed} took {worker_id} ahead of higher-ranked {job.job_id}"
                )
    sim.placed_now.clear()


async def _step(sim: Sim, action: str, n: int, jobs: list[JobSpec]) -> None:
    h = sim.harness
    online = [a for a in sim.agents if sim.online[a.worker_id]]
    if action == "submit" and jobs:
        spec = jobs.pop(0)
        rec = job_record(
            gpu_count=spec.gpu_count,
            labels={"gpu_type": spec.label} if spec.label else {},
            min_vram_gb=spec.min_vram_gb,
            gpu_name=spec.gpu_name,
            priority=spec.priority,
            max_retries=spec.max_retries,
        )
        requirements = rec.requirements()
        free = [
            w
            for w in h.ctx.workers.values()
            if w.schedulable and unmet(requirements, w.view()) is None
        ]
        hold = "awaiting approval (prop)" if spec.held else None
        job_id = str((await h.fleet.submit(rec, actor="prop", held=hold))["job_id"])
        if spec.held:
            sim.held.add(job_id)
            free = []  # held: never placed at submit, whatever fits
        assert (job_id in sim.stored_dispatched) == bool(free), (
            f"{job_id} placed at submit: {job_id in sim.stored_dispatched}; free fits: {free}"
        )
        sim.requirements[job_id] = requirements
        sim.rank[job_id] = (-spec.priority, rec.seq)
    elif action in ("ack", "complete", "fail", "stop") and (agent := sim.pick(sim.holders(), n)):
        held = sim.holding[agent.worker_id]
        assert held is not None
        job_id = held
        if job_id not in sim.acked:
            sim.acked.add(job_id)
            await agent.report(job_id, "starting")
        if action != "ack":
            sim.holding[agent.worker_id] = None
            # "stop": the agent stopped it on its own (shutting down) and says cancelled.
            word = {"complete": "completed", "fail": "failed", "stop": "cancelled"}[action]
            await agent.report(job_id, word)
    elif action in ("approve", "reject") and sim.held:
        job_id = sorted(sim.held)[n % len(sim.held)]
        sim.held.discard(job_id)
        await h.fleet.decide_approval(job_id, "prop", approve=action == "approve")
    elif action == "cancel" and h.ctx.jobs:
        live = sorted(h.ctx.jobs)
        await h.fleet.cancel(live[n % len(live)], actor="prop")
        sim.held.discard(live[n % len(live)])
    elif action == "preempt" and (agent := sim.pick(sim.holders(), n)):
        job_id = str(sim.holding[agent.worker_id])
        try:
            await h.fleet.preempt(job_id, "prop")
        except NotPreemptible:
            pass  # already being stopped (a cancel): that stop decides
        else:
            sim.preempted.add(job_id)  # once the agent confirms (in _observe) it waits
    elif action == "lose" and (agent := sim.pick(online, n)):
        sim.online[agent.worker_id] = False
        sim.holding[agent.worker_id] = None
        await agent.disconnect()
    elif action == "return" and (
        agent := sim.pick([a for a in sim.agents if not sim.online[a.worker_id]], n)
    ):
        sim.online[agent.worker_id] = True
        reply = await agent.register(current_job_id=None)
        assert reply["resume_job"] is None
        await agent.connect(agent.last_event_id)
    elif action == "drain" and (agent := sim.pick(sim.agents, n)):
        await h.fleet.drain(agent.worker_id, actor="prop")
    elif action == "resume" and (
        agent := sim.pick([a for a in sim.agents if h.worker(a.worker_id).drain_requested], n)
    ):
        await h.fleet.resume(agent.worker_id, actor="prop")
    elif action in ("sicken", "heal") and (agent := sim.pick(online, n)):
        worker_id = agent.worker_id
        beat = m.HeartbeatReceived(
            status="busy" if sim.holding[worker_id] else "idle",
            current_job_id=sim.holding[worker_id],
            job_progress=None,
            gpu_utilization=None,
            vram_used_gb=None,
            gpu_health=SICK if action == "sicken" else WELL,
        )
        assert await h.fleet.heartbeat(worker_id, beat)
        if action == "sicken" and worker_id not in sim.sick:
            sim.quarantined.add(worker_id)  # the reading turned unhealthy (a no-op if it was)
        (sim.sick.add if action == "sicken" else sim.sick.discard)(worker_id)
    elif action == "release" and (
        agent := sim.pick([a for a in sim.agents if h.worker(a.worker_id).quarantined], n)
    ):
        # Healthy or not: the admin's word (a quarantine is never lifted by a reading).
        await h.fleet.release_quarantine(agent.worker_id, actor="prop")
        sim.quarantined.discard(agent.worker_id)
    await h.settle()
    await _observe(sim)
    _check_actors(sim)


async def _scenario(
    data_dir: Path, workers: list[WorkerSpec], jobs: list[JobSpec], steps: list[tuple[str, int]]
) -> None:
    h = await FleetHarness.open(data_dir, SettlingClock(), FleetSettings(local_runner=False))
    try:
        agents = []
        for i, spec in enumerate(workers):
            name, vram = GPUS[spec.gpu]
            labels = {"gpu_type": spec.gpu_type} if spec.gpu_type else {}
            agent = await h.agent(
                f"w{i}", labels=labels, gpu=gpu_report(spec.gpu_count, vram, name)
            )
            if spec.draining:
                await h.fleet.drain(agent.worker_id, actor="prop")
            agents.append(agent)
        sim = Sim(h, agents)
        create_dispatched_job = h.ctx.persistence.create_dispatched_job

        async def counted(rec: JobRecord, *args: Any, **kwargs: Any) -> Any:
            sim.stored_dispatched.append(rec.job_id)
            return await create_dispatched_job(rec, *args, **kwargs)

        h.ctx.persistence.create_dispatched_job = counted  # type: ignore[method-assign]
        sim.holding = {a.worker_id: None for a in agents}
        sim.online = {a.worker_id: True for a in agents}
        queue = list(jobs)
        for action, n in steps:
            await _step(sim, action, n, queue)
        # Finish: everyone back, no drains, every held job completed, until nothing moves.
        while queue:
            await _step(sim, "submit", 0, queue)
        while sim.held:
            await _step(sim, "approve", 0, queue)
        while not all(sim.online.values()):
            await _step(sim, "return", 0, queue)
        while any(h.worker(a.worker_id).drain_requested for a in agents):
            await _step(sim, "resume", 0, queue)
        while sim.sick:
            await _step(
                sim,
                "heal",
                sim.agents.index(next(a for a in agents if a.worker_id in sim.sick)),
                queue,
            )
        while any(h.worker(a.worker_id).quarantined for a in agents):
            await _step(sim, "release", 0, queue)
        for _ in range(len(sim.requirements) + 1):
            if not sim.holders():
                break
            for agent in sim.holders():
                await _step(sim, "complete", sim.agents.index(agent), queue)
        assert not sim.holders()
        for job in h.ctx.jobs.values():
            assert job.state == JobState.PENDING
            fits = [
                w for w in h.ctx.workers.values() if not unmet(job.rec.requirements(), w.view())
            ]
            assert not fits, f"{job.job_id} still waits though {fits[0].worker_id} fits it"
        for job_id in sim.requirements:
            row = await h.job(job_id)
            kinds = await h.timeline_kinds(job_id)
            free = [
                a
                for a in await h.store.list_attempts(job_id)
                if a.kind in ("preempted", "undelivered", *INFRA_BUDGET_KINDS)
            ]
            assert row.attempts - len(free) <= row.max_retries + 1
            assert kinds.count("dispatched") == row.attempts
            terminal = [k for k in kinds if k in ("completed", "failed", "cancelled")]
            assert len(terminal) == (0 if row.state == "pending" else 1), kinds
    finally:
        await h.close()


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    workers=st.lists(workers_st, min_size=1, max_size=5),
    jobs=st.lists(jobs_st, min_size=1, max_size=8),
    steps=steps_st,
)
def test_scheduling_through_the_actors_keeps_its_promises(
    workers: list[WorkerSpec], jobs: list[JobSpec], steps: list[tuple[str, int]]
) -> None:
    parent = str(_RAM_DISK) if _RAM_DISK.is_dir() else None
    with tempfile.TemporaryDirectory(dir=parent) as data_dir:
        asyncio.run(_scenario(Path(data_dir), workers, jobs, steps))
