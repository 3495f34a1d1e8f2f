"""Which pending job runs on which idle worker (wait_reasons.py says why a job still waits).

Pure functions over small frozen views: no I/O, no asyncio, no clock. The scheduler
actor owns the state (who is pending, who is idle) and calls in here for decisions.

Policy (docs/scheduling.md is the user-facing version):
- only a connected worker (one with an open SSE stream) is ever chosen: a job written
  to a stream nobody reads waits for an acknowledgement that cannot come;
- a worker qualifies for a job when the target allows it (worker: remote only, local:
  the orchestrator's own runner only, auto: either) and it meets every requirement:
  GPU count, per-GPU VRAM, GPU name glob (case-insensitive), label globs
  (case-sensitive, fnmatch), and the worker's allowed commands, when it reported them,
  allow the job's own command and loader env (tunefleet/commands.py);
- jobs go by priority (high first), then submission order; a job nothing fits is
  skipped, never blocking the jobs behind it;
- a job takes the best fit among free qualifying workers: fewest GPUs, then least
  VRAM, then worker id; `auto` takes a remote worker whenever one qualifies and the
  local runner only otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tunefleet.actors.idle_workers import IdleWorkers
from tunefleet.actors.matching_index import (
    FleetIndex,
    RequirementsKey,
    command_refusal,
    fit_order,
    gpu_name_matches,
    label_matches,
)
from tunefleet.actors.tenancy_limits import Holder, LimitGate
from tunefleet.errors import TunefleetError

TARGETS = ("worker", "local", "auto")
# SimpleTuner's config.json writes CLI-style keys; a plain key is accepted too.
NUM_PROCESSES_KEYS = ("--num_processes", "num_processes")


class InvalidRequirements(TunefleetError, ValueError):
    """A job's requirements are malformed (the message says which value and why)."""

    status = 400


@dataclass(frozen=True, slots=True)
class Requirements:
    """What a job needs from a worker. ``gpu_count=0`` means no GPU at all (CPU jobs)."""

    target: str
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_count: int = 1
    min_vram_gb: float | None = None
    gpu_name: str | None = None
    # The job's own command (None: the worker's default) and the loader env names it sets.
    command: tuple[str, ...] | None = None
    loader_env: tuple[str, ...] = ()
    # Computed once here, not on every matching pass over a long queue.
    _key: RequirementsKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise InvalidRequirements(
                f"target must be one of worker, local, auto; got {self.target!r}"
            )
        if self.gpu_count < 0:
            raise InvalidRequirements(f"gpu_count must be 0 or more; got {self.gpu_count}")
        if self.min_vram_gb is not None and self.min_vram_gb < 0:
            raise InvalidRequirements(f"min_vram_gb must be 0 or more; got {self.min_vram_gb}")
        # A private copy: the caller's dict may change after the job was queued.
        object.__setattr__(self, "labels", dict(self.labels))
        key = RequirementsKey(
            target=self.target,
            gpu_count=self.gpu_count,
            min_vram_gb=self.min_vram_gb or None,
            gpu_name=self.gpu_name.lower() if self.gpu_name else None,
            labels=tuple(sorted(self.labels.items())),
            command=self.command,
            loader_env=self.loader_env,
        )
        object.__setattr__(self, "_key", key)

    def key(self) -> RequirementsKey:
        """Hashable identity: jobs with equal keys qualify for exactly the same workers."""
        return self._key


@dataclass(frozen=True, slots=True)
class WorkerView:
    """What matching needs to know about one known, not offline worker. VRAM is per GPU."""

    worker_id: str
    is_local: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_count: int = 0
    gpu_vram_gb: float | None = None
    gpu_name: str | None = None
    # Has an open SSE stream. A worker without one is never chosen (a job_submit would
    # reach nobody), but it still counts when a wait reason says what could run a job.
    connected: bool = True
    # What the agent said it will run (--allowed-commands); None: not said, anything.
    allowed_commands: tuple[str, ...] | None = None
    # False until its agent first registers: its GPUs are unknown (reported as none).
    hardware_known: bool = True
    # Why it is quarantined (it takes no job; wait reasons say why); None: it is not.
    # An unhealthy GPU reading quarantines it too (worker_health.py).
    quarantine_reason: str | None = None
    # A drain was asked for, or an ephemeral worker is retiring: it takes no new job, so
    # a retry never waits for it (scheduler._fits_outside).
    draining: bool = False


@dataclass(frozen=True, slots=True)
class PendingJob:
    job_id: str
    priority: int
    seq: int
    requirements: Requirements
    # The workers where it failed (retry_policy.py), and the one that never acknowledged
    # its last dispatch: another fitting idle worker is preferred (see plan()). The
    # scheduler drops the failed ones when no other worker of the fleet fits.
    avoid: frozenset[str] = frozenset()
    # Those of ``avoid`` where it failed for infrastructure reasons (retry_policy.py).
    shun: frozenset[str] = frozenset()
    # Workers it must not go to (the scheduler sets it from ``avoid`` while another
    # worker of the fleet fits): the job waits for another rather than go back.
    exclude: frozenset[str] = frozenset()
    # Whose it is, for the concurrency limits (tenancy_limits.py).
    user: str | None = None
    team: str | None = None

    def holder(self) -> Holder:
        return Holder(self.user, self.team, self.requirements.gpu_count)


# --- one worker against one job -------------------------------------------------------


def unmet(req: Requirements, worker: WorkerView) -> str | None:
    """The first requirement ``worker`` fails for ``req``, as a short phrase; None if it fits."""
    if req.target == "worker" and worker.is_local:
        return "is the orchestrator's local runner; target worker needs a remote worker"
    if req.target == "local" and not worker.is_local:
        return "is a remote worker; target local runs only on the orchestrator"
    if worker.gpu_count < req.gpu_count:
        return f"has {_gpus(worker.gpu_count)}, needs {req.gpu_count}"
    if req.min_vram_gb:
        if worker.gpu_vram_gb is None:
            return f"does not report its VRAM, needs {_gb(req.min_vram_gb)}"
        if worker.gpu_vram_gb < req.min_vram_gb:
            return f"has {_gb(worker.gpu_vram_gb)} VRAM per GPU, needs {_gb(req.min_vram_gb)}"
    if req.gpu_name and not gpu_name_matches(worker.gpu_name, req.gpu_name.lower()):
        if worker.gpu_name is None:
            return f"does not report a GPU name, needs {req.gpu_name!r}"
        return f"has GPU {worker.gpu_name!r}, which does not match {req.gpu_name!r}"
    for key, pattern in req.labels.items():
        problem = _label_problem(worker.labels, key, pattern)
        if problem is not None:
            return problem
    refused = command_refusal(worker.allowed_commands, req.command, req.loader_env)
    if refused is not None:
        return f"would refuse the job: {refused}"
    return None


def _label_problem(labels: Mapping[str, str], key: str, pattern: str) -> str | None:
    if label_matches(labels, key, pattern):
        return None
    if key not in labels:
        return f"has no label {key}"
    return f"label {key}={labels[key]} does not match {pattern}"


# --- the matching pass ----------------------------------------------------------------


def plan(
    pending: Sequence[PendingJob],
    idle_workers: Sequence[WorkerView] | IdleWorkers,
    gate: LimitGate | None = None,
) -> list[tuple[str, str]]:
    """Assign idle workers to pending jobs: ``[(job_id, worker_id), ...]`` in job order.

    Each worker and each job appears at most once; only workers with an open stream are
    chosen. A pass with only a few jobs walks the idle workers in fit order and stops at
    the first that qualifies (idle_workers.py; the scheduler keeps them in that order
    between passes). A longer queue indexes them instead: one shortlist per distinct set
    of label/GPU-name globs, then about one bisect per GPU-count bucket for each job
    (matching_index.py). Both choose the same worker. A job that avoids a worker (it did
    not acknowledge the job's last dispatch) is then moved off it where another worker no
    job was given fits (``_steer_clear``); only then may a placement come out of order.

    With a ``gate`` (concurrency limits), a job the limits hold is skipped like one
    nothing fits, never blocking the jobs of other users and teams behind it, and each
    job placed is counted before the next is asked about.
    """
    if any(job.exclude for job in pending):  # rare: retries after failures
        pool = idle_workers if isinstance(idle_workers, IdleWorkers) else IdleWorkers(idle_workers)
        placements = _plan_in_fit_order(pending, pool, gate)
    else:
        placements = _plan(pending, idle_workers, gate)
    if any(job.avoid for job in pending):  # rare: after a failure or unacknowledged dispatch
        pool = idle_workers if isinstance(idle_workers, IdleWorkers) else IdleWorkers(idle_workers)
        return _steer_clear(pending, pool, placements, gate)
    return placements


def _plan(
    pending: Sequence[PendingJob],
    idle_workers: Sequence[WorkerView] | IdleWorkers,
    gate: LimitGate | None,
) -> list[tuple[str, str]]:
    if isinstance(idle_workers, IdleWorkers):
        if len(pending) < SCAN_BELOW_JOBS:
            return _plan_in_fit_order(pending, idle_workers, gate)
        index = FleetIndex(idle_workers.values())  # already one view per id, all connected
    elif len(pending) < SCAN_BELOW_JOBS:
        return _plan_in_fit_order(pending, IdleWorkers(idle_workers), gate)
    else:  # ids once each, and only workers with an open stream
        index = FleetIndex({w.worker_id: w for w in idle_workers if w.connected}.values())
    hopeless: set[RequirementsKey] = set()  # nothing fits now, so nothing will this pass
    placed_jobs: set[str] = set()
    placements: list[tuple[str, str]] = []
    for job in sorted(pending, key=lambda j: (-j.priority, j.seq, j.job_id)):
        if index.free == 0:
            break
        key = job.requirements.key()
        if key in hopeless or job.job_id in placed_jobs:
            continue
        if gate is not None and not gate.allows(job.holder()):
            continue
        rank = index.best_for(key)
        if rank is None:
            hopeless.add(key)
            continue
        index.take(rank)
        if gate is not None:
            gate.take(job.holder())
        placed_jobs.add(job.job_id)
        placements.append((job.job_id, index.workers[rank].worker_id))
    return placements


def _steer_clear(
    pending: Sequence[PendingJob],
    pool: IdleWorkers,
    placements: list[tuple[str, str]],
    gate: LimitGate | None,
) -> list[tuple[str, str]]:
    """Move each job placed on the worker it avoids to the best other free worker that
    fits it, if any (a worker that takes job_submits and never acknowledges them would
    otherwise get the same job again, each time after the acknowledgement timeout).
    Only workers nobody holds are taken, so no job loses its place. A worker given up is
    free again: another avoiding job may move onto it, so the moves repeat until none is
    left to make (each one takes a job off the worker it avoids: at most one per job);
    it may also fit a job left unplaced, so those are planned again on what is free."""
    jobs = {job.job_id: job for job in pending}
    taken = {worker_id for _, worker_id in placements}
    steered = list(placements)
    moved = True
    while moved:
        moved = False
        for i, (job_id, worker_id) in enumerate(steered):
            avoid = jobs[job_id].avoid
            if worker_id not in avoid:
                continue
            other = pool.best_for(jobs[job_id].requirements.key(), taken | avoid)
            if other is not None:  # else only the avoided worker fits: it still goes there
                steered[i] = (job_id, other.worker_id)
                taken.add(other.worker_id)
                taken.discard(worker_id)
                moved = True
    if steered == placements:
        return placements
    placed = {job_id for job_id, _ in steered}
    taken = {worker_id for _, worker_id in steered}
    left = [job for job in pending if job.job_id not in placed]
    free = [worker for worker in pool.values() if worker.worker_id not in taken]
    # The gate has counted every job in ``steered`` already: only ``left`` is asked about.
    return steered + plan(left, free, gate) if left and free else steered


# Below this many pending jobs a pass walks the idle workers in fit order instead of
# indexing them. Jobs mostly arrive one at a time, and building the index costs about
# 6 us a worker (30 ms per pass at 5,000 idle workers) where the walk usually stops
# within the first few workers.
SCAN_BELOW_JOBS = 4


def _plan_in_fit_order(
    pending: Sequence[PendingJob], pool: IdleWorkers, gate: LimitGate | None
) -> list[tuple[str, str]]:
    """plan() for a few jobs: for each, the free qualifying worker first in fit order."""
    taken: set[str] = set()
    placements: list[tuple[str, str]] = []
    for job in sorted(pending, key=lambda j: (-j.priority, j.seq, j.job_id)):
        if len(taken) >= len(pool):
            break  # every idle worker is given: the rest of a long queue waits
        if any(placed == job.job_id for placed, _ in placements):
            continue
        if gate is not None and not gate.allows(job.holder()):
            continue
        worker = pool.best_for(
            job.requirements.key(), taken | job.exclude if job.exclude else taken
        )
        if worker is not None:
            if gate is not None:
                gate.take(job.holder())
            taken.add(worker.worker_id)
            placements.append((job.job_id, worker.worker_id))
    return placements


# --- the job's GPU count from its training config -------------------------------------


def job_gpu_count_from_config(config: Mapping[str, object]) -> int | None:
    """GPU count implied by SimpleTuner's ``num_processes`` (one process per GPU).

    None when the config does not say. Raises InvalidRequirements for a value that is not a
    whole number of at least 1, or when both spellings are present and disagree.
    """
    found = {
        key: _parse_num_processes(key, config[key])
        for key in NUM_PROCESSES_KEYS
        if key in config and config[key] not in (None, "")
    }
    values = set(found.values())
    if len(values) > 1:
        both = " and ".join(f"{k}={v}" for k, v in found.items())
        raise InvalidRequirements(f"config sets {both}; keep one")
    return values.pop() if values else None


def _parse_num_processes(key: str, raw: object) -> int:
    value: int | None = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, str):
        text = raw.strip()
        if text.isascii() and text.isdigit():  # "2"; "2.5", "two", "-1" are refused below
            value = int(text)
    if value is None or value < 1:
        raise InvalidRequirements(f"{key} must be a whole number of at least 1; got {raw!r}")
    return value


# --- wording helpers ------------------------------------------------------------------


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def _gb(value: float) -> str:
    return f"{value:g} GB"


__all__ = [
    "NUM_PROCESSES_KEYS",
    "TARGETS",
    "IdleWorkers",
    "InvalidRequirements",
    "PendingJob",
    "Requirements",
    "RequirementsKey",
    "WorkerView",
    "fit_order",
    "gpu_name_matches",
    "job_gpu_count_from_config",
    "label_matches",
    "plan",
    "unmet",
]
