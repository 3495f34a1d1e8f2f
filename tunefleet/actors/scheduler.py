"""Scheduler: the single place that matches pending jobs to idle workers.

Event-driven: a job waiting, a worker changing, each schedules one matching pass
(coalesced, so a burst of events costs one pass). It only ever *tells* other actors,
so no ask cycle can form through it.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from tunefleet.actors import messages as m
from tunefleet.actors.fair_plan import plan_fair
from tunefleet.actors.fair_share import (
    Holding,
    Reclaim,
    RunningJob,
    book_of,
    quota_hold_reason,
)
from tunefleet.actors.fair_share_state import FairShareState
from tunefleet.actors.idle_workers import IdleWorkers
from tunefleet.actors.matching import PendingJob, WorkerView, plan, unmet
from tunefleet.actors.matching_index import SIDES, fits
from tunefleet.actors.queue_ranks import QueueRanks
from tunefleet.actors.retry_policy import avoid_phrase, exclusion
from tunefleet.actors.runtime import LATER, Actor
from tunefleet.actors.tenancy_limits import (
    ConcurrencyLimits,
    Holder,
    LimitGate,
    Usage,
    hold_reason,
)
from tunefleet.actors.wait_reasons import WaitReasons, wait_reason
from tunefleet.audit import AuditKind
from tunefleet.fsm.job import JobState

log = structlog.get_logger(__name__)

if TYPE_CHECKING:
    from tunefleet.actors.context import FleetContext


class Scheduler(Actor):
    def __init__(
        self,
        ctx: FleetContext,
        limits: ConcurrencyLimits | None = None,
        fair: FairShareState | None = None,
    ) -> None:
        super().__init__("scheduler")
        self.ctx = ctx
        self.pending: dict[str, PendingJob] = {}
        self.order = QueueRanks()  # the pending jobs' ranks, kept as they come and go
        # Kept in best-fit order, so placing a job stops at the first worker that fits.
        self.idle = IdleWorkers()
        self.fleet: dict[str, WorkerView] = {}
        self.reasons = WaitReasons()  # kept while no worker's view changes
        self.pass_scheduled = False
        self.limits = limits if limits is not None else ConcurrencyLimits()
        # Per worker, the job a pass gave it, until the worker is free again: while the
        # job's actor has not taken it yet (still pending there) it counts against the
        # limits from here. Kept without limits too, as they may be set at any time.
        self.granted: dict[str, tuple[str, Holder]] = {}
        # Team quotas, standing and reclaims (issue 25); inactive while no team has any.
        self.fair = fair if fair is not None else FairShareState()
        self._tasks: set[asyncio.Task[Any]] = set()  # reclaims being audited and told
        self._wake_at: float | None = None  # a pass owed when a protection window ends

    def answer_at_once(self, message: object) -> object:
        # A new job's placement needs no await: answered in the submission's own task
        # while no message waits here (issue 14: a task and two loop turns per submit).
        # Nor does a worker's change (told once a cycle, as it becomes free) while no job
        # waits, or a job's leaving the queue: neither schedules a pass. A change that may
        # (a job waits) goes through the mailbox, so the pass it schedules still follows
        # every change told in the same burst (coalesced, as the best fit needs).
        match message:
            case m.PlaceNewJob(job=job):
                return self.place_new(job)
            case m.WorkerChanged() if not self.pending:
                self._on_worker_changed(message)
                return None
            case m.JobGone(job_id=job_id):
                self._unwait(job_id)
                return None
        return LATER

    async def receive(self, message: object) -> object:
        match message:
            case m.JobWaiting(job=job):
                self._wait(job)
                self._schedule_pass()
            case m.JobGone(job_id=job_id):
                self._unwait(job_id)
            case m.WorkerChanged():
                self._on_worker_changed(message)
            case m.SchedulePass():
                if self.pass_scheduled:
                    self._run_pass()
            case m.PlaceNewJob(job=job):
                return self.place_new(job)
            case m.SetConcurrencyLimits(limits=limits):
                self.limits = limits
                self._schedule_pass()
            case m.LimitUsage():
                return self.usage()
            case m.SetTeamQuotas(quotas=quotas):
                self.fair.set_quotas(quotas)
                self._schedule_pass()
            case m.QuotaStandings():
                return self.quota_standings()
            case m.QueueNewJob(job=job):
                self._wait(job)
                self._run_pass()
                if self.fair.active and job.job_id in self.pending:
                    self._schedule_pass()  # it may call for a reclaim: a pass is owed
                return self.place_in_queue(job.job_id)
            case m.HasWorkFor(worker=view):
                self._run_pass()
                return self._has_work_for(view)
            case m.ExplainWait(job_id=job_id):
                self._run_pass()
                return self.explain(job_id)
            case m.QueuePlace(job_id=job_id):
                self._run_pass()
                return self.place_in_queue(job_id)
            case _:
                raise TypeError(f"Scheduler cannot handle {type(message).__name__}")
        return None

    def _on_worker_changed(self, msg: m.WorkerChanged) -> None:
        if msg.view is None:
            if self.fleet.pop(msg.worker_id, None) is not None:
                self.reasons.forget()
        elif self.fleet.get(msg.worker_id) != msg.view:
            # Busy or idle is not in the view: most changes leave the reasons as they are.
            self.fleet[msg.worker_id] = msg.view
            self.reasons.forget()
        if msg.schedulable:
            self.granted.pop(msg.worker_id, None)
        if self.fair.active and (msg.schedulable or msg.view is None):
            # Its job's attempt ended now: counted to this moment, not to the next pass.
            self.fair.ledger.release_worker(msg.worker_id, self.ctx.clock.time())
        if msg.schedulable and msg.view is not None and msg.view.connected:
            self.idle.add(msg.view)
            self._schedule_pass()
        else:
            self.idle.discard(msg.worker_id)

    def _wait(self, job: PendingJob) -> None:
        self._unwait(job.job_id)  # told again (a restart, a requeue): its latest view
        self.pending[job.job_id] = job
        self.order.add(job.priority, job.seq)

    def _unwait(self, job_id: str) -> None:
        job = self.pending.pop(job_id, None)
        if job is not None:
            self.order.remove(job.priority, job.seq)

    def _schedule_pass(self) -> None:
        # Under quotas a waiting job may reclaim a busy worker: no idle one is needed.
        if not self.pass_scheduled and self.pending and (self.idle or self.fair.active):
            self.pass_scheduled = True
            self.tell(m.SchedulePass())

    def _run_pass(self) -> None:
        owed = self.pass_scheduled
        self.pass_scheduled = False
        if self.fair.active:
            # With no worker idle, only a pass owed to an event may reclaim: a question
            # (a queue position, a wait reason) costs nothing then.
            if self.idle or owed:
                self._run_fair_pass()
            return
        if not self.pending or not self.idle:
            return
        # No limit set: no counting at all, the pass costs what it did before limits.
        gate = None if self.limits.unlimited else LimitGate(self.limits, self.usage())
        self._dispatch(plan(self._retries_steered(), self.idle, gate))

    def _dispatch(self, placements: list[tuple[str, str]]) -> None:
        unused = False
        for job_id, worker_id in placements:
            waiting = self.pending[job_id]
            self._unwait(job_id)
            job = self.ctx.jobs.get(job_id)
            if job is not None and job.try_tell(m.DispatchTo(worker_id)):
                self.idle.discard(worker_id)
                self.granted[worker_id] = (job_id, waiting.holder())
                if self.fair.active:
                    gpus = waiting.requirements.gpu_count
                    now = self.ctx.clock.time()
                    self.fair.ledger.hold(Holding(job_id, waiting.team, gpus, now, worker_id))
            else:
                unused = True
        if unused:
            # A worker planned for a job that had just ended is still free: plan again.
            self._schedule_pass()

    def _retries_steered(self) -> list[PendingJob]:
        return [self._steered(job) if job.avoid else job for job in self.pending.values()]

    def _steered(self, job: PendingJob) -> PendingJob:
        """A retry keeps off the workers it failed on while another worker of the fleet
        (idle or busy; not quarantined or draining, which take no new job) fits it: it
        waits for that one (retry_policy.py)."""
        excluded = exclusion(
            job.avoid, job.shun, lambda kept_off: self._fits_outside(job, kept_off)
        )
        return replace(job, exclude=excluded) if excluded else job

    def _fits_outside(self, job: PendingJob, kept_off: frozenset[str]) -> bool:
        key = job.requirements.key()
        return any(
            view.connected
            and view.quarantine_reason is None
            and not view.draining
            and view.worker_id not in kept_off
            and view.is_local in SIDES[key.target]
            and fits(key, view)
            for view in self.fleet.values()
        )

    def _run_fair_pass(self) -> None:
        """The pass under team quotas (fair_plan.py), then the reclaims its leftover
        jobs call for (fair_share.py), handed to the preempter."""
        if not self.pending:
            return
        now = self.ctx.clock.time()
        running = self._running(now)
        standing = self.fair.observe(running, now, self._worker_free)
        book = book_of(self.fair.quotas, running)
        if self.idle:
            gate = None if self.limits.unlimited else LimitGate(self.limits, self.usage())
            pending = self._retries_steered()
            self._dispatch(plan_fair(pending, self.idle.values(), book, standing, gate))
        if self.fair.may_reclaim(self.pending.values(), book):
            waiting = sorted(
                self.pending.values(),
                key=lambda j: (-j.priority, standing.get(j.team, 0.0), j.seq),
            )
            # A quarantined worker freed by a reclaim would take no job: never reclaimed.
            usable = {w: v for w, v in self.fleet.items() if v.quarantine_reason is None}
            for decision in self.fair.reclaims(waiting, running, book, usable, now):
                self._reclaim(decision, now)
            wake = self.fair.next_unprotected(running, now)
            if wake is not None and (self._wake_at is None or wake < self._wake_at):
                self._wake_at = wake  # a protected borrower may be reclaimed then
                self.ctx.clock.call_later(wake - now, self._woken)  # one timer at a time

    def _worker_free(self, worker_id: str) -> bool:
        return worker_id in self.idle or worker_id not in self.fleet

    def _woken(self) -> None:
        self._wake_at = None
        self._schedule_pass()

    def _reclaim(self, decision: Reclaim, now: float) -> None:
        told = self.fair.started(decision, now)
        self.ctx.metrics.reclaims.labels(team=decision.victim_team or "").inc()
        task = asyncio.get_running_loop().create_task(self._record_reclaim(decision, told))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _record_reclaim(self, decision: Reclaim, told: Any) -> None:
        try:
            await self.ctx.audit.record(
                AuditKind.QUEUE_RECLAIM,
                actor="scheduler",
                target=decision.victim,
                for_job=decision.job_id,
                team=decision.team,
                victim_team=decision.victim_team,
                worker_id=decision.worker_id,
                why=decision.why,
                preempter="wired" if self.fair.preempter is not None else "none",
            )
            if told is not None:
                await told
        except Exception as error:  # the scheduler goes on; the victim may still run
            self.fair.failed(decision)  # the next pass an event brings may look again
            log.warning(
                "reclaim not recorded or not told", victim=decision.victim, error=repr(error)
            )

    def _running(self, now: float) -> list[RunningJob]:
        """The jobs holding workers (running, dispatched, or given one by a pass), as
        fair share sees them: team, priority, GPUs, the worker's GPU name, since when."""
        running: list[RunningJob] = []
        for worker_id, (job_id, holder) in list(self.granted.items()):
            actor = self.ctx.jobs.get(job_id)
            if actor is not None and actor.state == JobState.PENDING and job_id not in self.pending:
                view = self.fleet.get(worker_id)
                name = view.gpu_name if view is not None else None
                rec = actor.rec
                running.append(
                    RunningJob(job_id, holder.team, rec.priority, holder.gpus, worker_id, name, now)
                )
        for actor in self.ctx.jobs.values():
            if actor.state in (JobState.DISPATCHED, JobState.RUNNING):
                rec = actor.rec
                view = self.fleet.get(rec.worker_id or "")
                running.append(
                    RunningJob(
                        rec.job_id,
                        rec.team_name,
                        rec.priority,
                        rec.gpu_count,
                        rec.worker_id or "",
                        view.gpu_name if view is not None else None,
                        rec.dispatched_at if rec.dispatched_at is not None else now,
                    )
                )
        return running

    def quota_standings(self) -> dict[str, dict[str, Any]]:
        """Per team with a quota, GPUs held or used: quota, use, borrowed, standing.
        Empty while fair share is off (no quota, no weight): nothing is counted then."""
        if not self.fair.active:
            return {}
        now = self.ctx.clock.time()
        return self.fair.standings_view(self._running(now), now)

    def place_new(self, job: PendingJob) -> str | m.MustWait | None:
        """The best idle worker for a job about to be submitted, taken for it; if none
        fits now, why it will wait. Older jobs come first: the pass they are owed runs
        before (and again while one planned a worker for a job that had just ended), and
        once no pass is owed no pending job fits any idle worker (a pass places every job
        that fits one). So the worker chosen here is one no pending job could take."""
        while self.pass_scheduled:
            self._run_pass()
        if not self.limits.unlimited or self.fair.active:
            # Under limits (or quotas) a new job queues first (None: the queue decides), so the pass
            # that places it counts it: a job not yet stored has no actor to count by.
            held = None
            if not self.limits.unlimited:
                held = hold_reason(self.limits, self.usage(), job.holder())
            return m.MustWait(held) if held is not None else None
        worker = self.idle.best_for(job.requirements.key())
        if worker is None:
            return m.MustWait(self._reason(job))
        self.idle.discard(worker.worker_id)
        return worker.worker_id

    def explain(self, job_id: str) -> str | None:
        job = self.pending.get(job_id)
        if job is None:
            return None
        return self._reason(job)

    def _has_work_for(self, view: WorkerView) -> bool:
        """A pending job the worker fits that no limit holds (a held one has no use for
        it meanwhile); the running jobs are counted once for all of them."""
        usage = None if self.limits.unlimited else self.usage()
        return any(
            unmet(job.requirements, view) is None
            and (usage is None or hold_reason(self.limits, usage, job.holder()) is None)
            for job in self.pending.values()
        )

    def _reason(self, job: PendingJob) -> str:
        if not self.limits.unlimited:
            held = hold_reason(self.limits, self.usage(), job.holder())
            if held is not None:
                return held
        if self.fair.active:
            running = self._running(self.ctx.clock.time())
            book = book_of(self.fair.quotas, running)
            held = quota_hold_reason(book, job.team, job.requirements.gpu_name)
            if held is not None:
                return held
        excluded = self._steered(job).exclude if job.avoid else frozenset()
        if excluded:
            # Judged without the workers it keeps off: those are not what it waits for.
            views = [v for v in self.fleet.values() if v.worker_id not in excluded]
            idle = [w for w in self.idle if w not in excluded]
            waits = wait_reason(job.requirements, views, idle)
            return f"{avoid_phrase(excluded)}; {waits}"
        return self.reasons.reason(job.requirements, self._fleet_views, self.idle)

    def usage(self) -> Usage:
        """What the jobs holding workers hold: those dispatched or running, and those a
        pass gave a worker that have not taken it yet. Counted afresh from the job actors
        (a job that ends leaves them), so no second count can drift."""
        usage = Usage()
        for worker_id, (job_id, holder) in list(self.granted.items()):
            actor = self.ctx.jobs.get(job_id)
            if actor is None or actor.state != JobState.PENDING or job_id in self.pending:
                del self.granted[worker_id]  # ended, counted by its state below, or waits
            else:
                usage.add(holder)
        for actor in self.ctx.jobs.values():
            if actor.state in (JobState.DISPATCHED, JobState.RUNNING):
                rec = actor.rec
                usage.add(Holder(rec.user_name, rec.team_name, rec.gpu_count))
        return usage

    def _fleet_views(self) -> list[WorkerView]:
        return list(self.fleet.values())

    def place_in_queue(self, job_id: str) -> tuple[int | None, str | None]:
        """Its rank by priority, then submission order (queue_ranks.py keeps it)."""
        job = self.pending.get(job_id)
        if job is None:
            return None, None
        return self.order.rank(job.priority, job.seq), self._reason(job)
