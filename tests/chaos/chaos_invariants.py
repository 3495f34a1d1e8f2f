"""The invariants a chaos run must keep, checked from the orchestrator's job records and
from the trainers' own files. Pure: evidence in, findings out (tested on its own in
test_chaos_invariants.py, so a checker that cannot fail would be noticed).

What each family proves, and what it cannot:

- Records (per job, from GET /api/queue/{id}): every accepted job is still there after
  every restart and is completed exactly once (one ``completed`` attempt, one
  ``completed`` timeline entry), or failed after its last allowed attempt with the
  reason recorded (or at its last allowed never-acknowledged dispatch), or (only when
  the run could not settle) still live. Attempts are numbered 1..n, each but the last
  ended ``lost`` (or ``undelivered``: its stream closed before the acknowledgement, or
  no acknowledgement came in time, which spends no retry; or ``preempted``: stopped so
  its worker could take other work, which spends no retry either) with a reason, each one in the
  timeline (dispatched, started when it was, and its end), and attempt k ended before
  attempt k+1 was dispatched: the orchestrator never had a job on two workers at once.
- Records (per worker): the intervals [dispatched_at, ended_at] of all the attempts a
  worker was given never overlap: no worker held two jobs.
- Files (the markers the chaos trainer writes, the ledger the example trainer writes):
  every trainer process that ran belongs to a recorded attempt on the recorded worker
  and started after that attempt was dispatched; the completed attempt really ran to
  exit code 0 before the orchestrator recorded the completion; exactly one ledger line
  exists for it; one agent process never ran two trainers at once, and two agent
  processes of one worker only overlapped when the earlier one had been killed (its
  orphaned trainer). What files cannot prove: that a *lost* attempt's process stopped
  when the orchestrator gave up on it. A paused, partitioned or killed agent's trainer
  may run on (and even finish: a ledger line for a lost attempt). That is at-least-once
  execution, inherent to any orchestrator that cannot reach the machine; those runs are
  counted in the findings' stats (zombie runs, overlap seconds, duplicate completions),
  not failed. Only an agent process launched after the attempt was given up can prove
  that the orchestrator sent a dead attempt: that one is a violation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from tunefleet.fsm.job import MAX_UNDELIVERED

# Timestamps cross the API as ISO strings with milliseconds (truncated).
EPS_S = 0.01
LIVE = frozenset({"pending", "dispatched", "running"})
END_EVENT = {
    "lost": "requeued",
    "undelivered": "requeued",
    "preempted": "preempted",
    "completed": "completed",
    "failed": "failed",
}
# Outcomes that put the job back in the queue; undelivered and preempted attempts spend
# no retry.
REQUEUED = ("lost", "undelivered", "preempted")


@dataclass(frozen=True)
class AttemptView:
    number: int
    worker_id: str | None
    dispatched_at: float | None
    started_at: float | None
    ended_at: float | None
    outcome: str | None
    reason: str | None


@dataclass(frozen=True)
class TimelineEntry:
    at: float | None
    kind: str
    worker_id: str | None
    attempt: int | None


@dataclass(frozen=True)
class JobView:
    job_id: str
    status: str
    attempts: int
    max_retries: int
    worker_id: str | None
    error: str | None
    history: tuple[AttemptView, ...]
    timeline: tuple[TimelineEntry, ...]


@dataclass(frozen=True)
class Execution:
    """One trainer process, from its markers."""

    job_id: str
    attempt: int
    worker_id: str | None  # from its job directory; None: not under any agent's work dir
    pid: int
    agent_pid: int
    started_at: float
    ended_at: float | None  # None: unknown (no end marker and not killed by the injector)
    exit_code: int | str | None


@dataclass(frozen=True)
class LedgerLine:
    job_id: str
    attempt: int
    finished_at: float


@dataclass
class Evidence:
    jobs: dict[str, JobView]
    accepted: set[str]
    executions: list[Execution]
    ledger: list[LedgerLine]
    killed_agent_pids: set[int]
    settled: bool = True  # the fleet was healed and given time to finish every job
    agents_launched_at: dict[int, float] = field(default_factory=dict)  # agent pid → time
    agent_exits: list[str] = field(default_factory=list)  # agents that exited by themselves
    unrest: list[str] = field(default_factory=list)  # why the healed fleet never came to rest


@dataclass
class Findings:
    violations: list[str] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def bad(self, message: str) -> None:
        self.violations.append(message)

    def count(self, key: str, amount: float = 1) -> None:
        self.stats[key] += amount


def check(evidence: Evidence) -> Findings:
    findings = Findings()
    for message in evidence.agent_exits:
        findings.bad(message)
    for message in evidence.unrest:
        findings.bad(f"the healed fleet never came to rest: {message}")
    for job_id in sorted(evidence.accepted - evidence.jobs.keys()):
        findings.bad(f"{job_id}: accepted by the orchestrator but no longer in the queue")
    for job in evidence.jobs.values():
        findings.count(f"jobs_{job.status}")
        findings.count("attempts", len(job.history))
        check_job(job, evidence.settled, findings)
    check_workers(evidence.jobs.values(), findings)
    check_executions(evidence, findings)
    check_ledger(evidence, findings)
    return findings


# --- records, per job -------------------------------------------------------------------


def check_job(job: JobView, settled: bool, findings: Findings) -> None:
    bad = findings.bad
    jid = job.job_id
    if job.status == "cancelled" or job.status not in LIVE | {"completed", "failed"}:
        bad(f"{jid}: status {job.status!r}, but nothing cancels jobs in a chaos run")
    if job.status in LIVE and settled:
        bad(f"{jid}: still {job.status} after the healed fleet was given time to finish it")
    numbers = [a.number for a in job.history]
    if numbers != list(range(1, len(numbers) + 1)) or job.attempts != len(numbers):
        bad(f"{jid}: attempts counter {job.attempts} but attempt numbers {numbers}")
        return
    check_attempt_chain(job, findings)
    check_outcome(job, findings)
    check_timeline(job, findings)


def check_attempt_chain(job: JobView, findings: Findings) -> None:
    jid = job.job_id
    for index, attempt in enumerate(job.history):
        last = index == len(job.history) - 1
        open_ok = last and job.status in ("dispatched", "running")
        if attempt.dispatched_at is None or attempt.worker_id is None:
            findings.bad(f"{jid}: attempt {attempt.number} has no worker or dispatch time")
            continue
        if attempt.ended_at is None:
            if not open_ok:
                findings.bad(f"{jid}: attempt {attempt.number} never ended (job {job.status})")
            continue
        if open_ok:
            findings.bad(f"{jid}: job {job.status} but its attempt {attempt.number} ended")
        if attempt.ended_at + EPS_S < attempt.dispatched_at:
            findings.bad(f"{jid}: attempt {attempt.number} ended before it was dispatched")
        if not last and attempt.outcome not in REQUEUED:
            findings.bad(f"{jid}: attempt {attempt.number} ended {attempt.outcome!r}, then retried")
        if attempt.outcome in REQUEUED and not attempt.reason:
            findings.bad(f"{jid}: attempt {attempt.number} was lost without a recorded reason")
        if not last:
            following = job.history[index + 1]
            if following.dispatched_at is not None and (
                following.dispatched_at + EPS_S < attempt.ended_at
            ):
                findings.bad(
                    f"{jid}: attempt {following.number} dispatched to {following.worker_id} "
                    f"before attempt {attempt.number} on {attempt.worker_id} ended "
                    "(the job was on two workers at once)"
                )


def check_outcome(job: JobView, findings: Findings) -> None:
    jid = job.job_id
    outcomes = [a.outcome for a in job.history]
    completed = outcomes.count("completed")
    if job.status == "completed":
        if completed != 1 or outcomes[-1] != "completed":
            findings.bad(f"{jid}: completed, but its attempt outcomes are {outcomes}")
        elif job.worker_id != job.history[-1].worker_id:
            findings.bad(f"{jid}: completed on {job.history[-1].worker_id}, says {job.worker_id}")
    elif completed:
        findings.bad(f"{jid}: {job.status}, but an attempt completed: {outcomes}")
    if job.status == "failed":
        if not job.error:
            findings.bad(f"{jid}: failed without a recorded reason")
        elif not _out_of_retries(job, outcomes) and not _never_acknowledged(job, outcomes):
            findings.bad(
                f"{jid}: failed after {job.attempts} of {job.max_retries + 1} attempts: "
                f"{job.error!r} (the chaos trainer never fails by itself)"
            )
    if job.status == "pending" and outcomes and outcomes[-1] not in REQUEUED:
        findings.bad(f"{jid}: pending again, but its last attempt ended {outcomes[-1]!r}")


def _out_of_retries(job: JobView, outcomes: list[str | None]) -> bool:
    free = outcomes.count("undelivered") + outcomes.count("preempted")
    return job.attempts - free == job.max_retries + 1 and "no retries left" in str(job.error)


def _never_acknowledged(job: JobView, outcomes: list[str | None]) -> bool:
    """Failed at the bound on undelivered dispatches (its last one ends ``failed``)."""
    return outcomes.count("undelivered") == MAX_UNDELIVERED - 1 and str(job.error).startswith(
        f"dispatched {MAX_UNDELIVERED} times and never acknowledged"
    )


def check_timeline(job: JobView, findings: Findings) -> None:
    jid = job.job_id
    kinds = [entry.kind for entry in job.timeline]
    if kinds.count("submitted") != 1:
        findings.bad(f"{jid}: {kinds.count('submitted')} 'submitted' timeline entries")
    ends = sum(kinds.count(kind) for kind in ("completed", "failed", "cancelled"))
    expected_ends = 0 if job.status in LIVE else 1
    if ends != expected_ends:
        findings.bad(f"{jid}: {job.status} with {ends} final timeline entries: {kinds}")
    for attempt in job.history:

        def entries(kind: str, number: int = attempt.number) -> list[TimelineEntry]:
            return [e for e in job.timeline if e.kind == kind and e.attempt == number]

        dispatched = entries("dispatched")
        if len(dispatched) != 1 or dispatched[0].worker_id != attempt.worker_id:
            findings.bad(f"{jid}: attempt {attempt.number} dispatch in the timeline: {dispatched}")
        if len(entries("started")) != (1 if attempt.started_at is not None else 0):
            findings.bad(f"{jid}: attempt {attempt.number} 'started' entries do not match")
        if attempt.ended_at is not None:
            kind = END_EVENT.get(attempt.outcome or "", "?")
            if len(entries(kind)) != 1:
                findings.bad(
                    f"{jid}: attempt {attempt.number} ended {attempt.outcome!r}, "
                    f"with {len(entries(kind))} {kind!r} timeline entries"
                )


# --- records, per worker ------------------------------------------------------------------


def check_workers(jobs: Iterable[JobView], findings: Findings) -> None:
    held: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for job in jobs:
        for a in job.history:
            if a.worker_id and a.dispatched_at is not None:
                end = a.ended_at if a.ended_at is not None else float("inf")
                held[a.worker_id].append((a.dispatched_at, end, f"{job.job_id}#{a.number}"))
    for worker_id, spans in held.items():
        spans.sort()
        holder_end, holder = float("-inf"), ""
        for start, end, name in spans:
            if start + EPS_S < holder_end:
                findings.bad(f"{worker_id} held two jobs at once: {holder} and {name}")
            if end > holder_end:
                holder_end, holder = end, name


# --- the trainers' files -------------------------------------------------------------------


def check_executions(evidence: Evidence, findings: Findings) -> None:
    by_agent: dict[int, list[Execution]] = defaultdict(list)
    by_worker: dict[str, list[Execution]] = defaultdict(list)
    for run in evidence.executions:
        findings.count("trainer_runs")
        attempt = _attempt(evidence, run.job_id, run.attempt)
        if attempt is None or run.worker_id is None or attempt.worker_id != run.worker_id:
            findings.bad(
                f"{run.job_id}: a trainer ran attempt {run.attempt} on {run.worker_id}, "
                "which the job's attempt history does not record"
            )
            continue
        if attempt.dispatched_at is not None and run.started_at + EPS_S < attempt.dispatched_at:
            findings.bad(f"{run.job_id}: attempt {run.attempt} started before its dispatch")
        if run.ended_at is None:
            findings.count("trainer_runs_end_unknown")
        if given_up(attempt) and attempt.ended_at is not None:
            _count_zombie(run, attempt.ended_at, findings)
            launched = evidence.agents_launched_at.get(run.agent_pid)
            if launched is not None and launched > attempt.ended_at + EPS_S:
                findings.bad(
                    f"{run.job_id}: attempt {run.attempt} was given up, yet agent process "
                    f"{run.agent_pid}, launched {launched - attempt.ended_at:.2f} s after that, "
                    "was sent it and ran it"
                )
        by_agent[run.agent_pid].append(run)
        by_worker[run.worker_id].append(run)
    for job in evidence.jobs.values():
        if job.status == "completed":
            _check_completed_run(job, evidence.executions, findings)
    for agent_pid, runs in by_agent.items():
        for first, second in _overlapping(runs):
            findings.bad(
                f"agent process {agent_pid} ran two trainers at once: "
                f"{first.job_id}#{first.attempt} and {second.job_id}#{second.attempt}"
            )
    for worker_id, runs in by_worker.items():
        for first, second in _overlapping(runs):
            if (
                first.agent_pid != second.agent_pid
                and first.agent_pid in evidence.killed_agent_pids
            ):
                findings.count("orphan_overlaps")
                continue
            if first.agent_pid != second.agent_pid:
                findings.bad(
                    f"{worker_id} ran {first.job_id}#{first.attempt} and "
                    f"{second.job_id}#{second.attempt} at once"
                )


def _check_completed_run(job: JobView, runs: list[Execution], findings: Findings) -> None:
    """The completed attempt's trainer exited 0 before the orchestrator recorded it."""
    final = job.history[-1]
    recorded_at = final.ended_at if final.ended_at is not None else float("inf")
    for run in runs:
        if (run.job_id, run.attempt, run.exit_code) == (job.job_id, final.number, 0) and (
            run.ended_at is not None and run.ended_at <= recorded_at + EPS_S
        ):
            return
    findings.bad(
        f"{job.job_id}: completed, but no trainer of attempt {final.number} exited 0 "
        "before the completion was recorded"
    )


def given_up(attempt: AttemptView) -> bool:
    """The orchestrator stopped counting on this attempt without hearing it end: its
    worker was lost (requeued, or failed with no retries left)."""
    if attempt.outcome in REQUEUED:
        return True
    return attempt.outcome == "failed" and "no retries left" in (attempt.reason or "")


def _count_zombie(run: Execution, lost_at: float, findings: Findings) -> None:
    """A lost attempt's process that ran on after the orchestrator gave up on it."""
    end = run.ended_at if run.ended_at is not None else lost_at
    if end > lost_at + EPS_S:
        findings.count("zombie_runs")
        findings.count("zombie_seconds", round(end - max(lost_at, run.started_at), 3))


def _overlapping(runs: list[Execution]) -> list[tuple[Execution, Execution]]:
    ordered = sorted(runs, key=lambda r: r.started_at)
    pairs = []
    for index, first in enumerate(ordered):
        if first.ended_at is None:
            continue  # unknown end: nothing can be proven either way (counted above)
        for second in ordered[index + 1 :]:
            if second.started_at + EPS_S >= first.ended_at:
                break
            pairs.append((first, second))
    return pairs


def check_ledger(evidence: Evidence, findings: Findings) -> None:
    lines: dict[tuple[str, int], int] = defaultdict(int)
    for line in evidence.ledger:
        lines[(line.job_id, line.attempt)] += 1
    for (job_id, number), count in lines.items():
        attempt = _attempt(evidence, job_id, number)
        if attempt is None:
            findings.bad(f"{job_id}: ledger line for attempt {number}, which was never recorded")
        elif count > 1:
            findings.bad(f"{job_id}: attempt {number} completed {count} times in the ledger")
        elif given_up(attempt):
            findings.count("duplicate_completions_of_lost_attempts")
        elif attempt.outcome != "completed":
            findings.bad(
                f"{job_id}: ledger line for attempt {number}, which ended {attempt.outcome!r}"
            )
    for job in evidence.jobs.values():
        if job.status == "completed":
            number = job.history[-1].number
            if lines.get((job.job_id, number), 0) != 1:
                findings.bad(
                    f"{job.job_id}: completed, but attempt {number} has "
                    f"{lines.get((job.job_id, number), 0)} ledger lines"
                )


def _attempt(evidence: Evidence, job_id: str, number: int) -> AttemptView | None:
    job = evidence.jobs.get(job_id)
    if job is None:
        return None
    return next((a for a in job.history if a.number == number), None)
