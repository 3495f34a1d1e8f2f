"""Property tests for plan() and wait_reason() over random fleets and job mixes.

Each property is stated against ``unmet()``, the one-worker rule, so the fast index
inside plan() is checked against the plain definition. "Queue order" is priority
descending, then seq ascending; "at J's turn" means before J in queue order was placed,
i.e. with the workers given to jobs earlier in queue order already taken.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunefleet.actors.idle_workers import IdleWorkers
from tunefleet.actors.matching import (
    PendingJob,
    Requirements,
    WorkerView,
    label_matches,
    plan,
    unmet,
)
from tunefleet.actors.wait_reasons import wait_reason

EXAMPLES = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

GPU_NAMES = [None, "NVIDIA A10", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
LABEL_VALUES = {"gpu_type": ["a10", "a100", "a100-80g", "h100"], "zone": ["us-1", "eu-1"]}
LABEL_PATTERNS = {"gpu_type": ["a100*", "a10", "h100", "*", "a?00"], "zone": ["us-*", "eu-1"]}


# What workers report they run (None: not said) and what jobs ask to run (None: the
# worker's default).
ALLOWED_COMMANDS = [None, None, None, ("python -m simpletuner.train",), ("sh -c **",), ("**",)]
JOB_COMMANDS = [None, None, None, ("sh", "-c", "id"), ("python", "-m", "simpletuner.train")]


@st.composite
def fleets(draw: st.DrawFn) -> list[WorkerView]:
    count = draw(st.integers(0, 12))
    local_at = draw(st.one_of(st.none(), st.integers(0, max(count - 1, 0))))
    workers = []
    for i in range(count):
        labels = {
            k: draw(st.sampled_from(v)) for k, v in LABEL_VALUES.items() if draw(st.booleans())
        }
        workers.append(
            WorkerView(
                worker_id=f"w_{draw(st.integers(0, 99)):02}_{i}",  # ids not in creation order
                is_local=i == local_at,
                labels=labels,
                gpu_count=draw(st.sampled_from([0, 1, 1, 2, 4, 8])),
                gpu_vram_gb=draw(st.sampled_from([None, 16.0, 24.0, 40.0, 80.0])),
                gpu_name=draw(st.sampled_from(GPU_NAMES)),
                # Now and then registered with no open stream (not yet, or no longer),
                # or never registered at all (its GPUs unknown).
                connected=(connected := draw(st.integers(0, 3)) > 0),
                hardware_known=connected or draw(st.booleans()),
                allowed_commands=draw(st.sampled_from(ALLOWED_COMMANDS)),
            )
        )
    return workers


@st.composite
def requirements(draw: st.DrawFn) -> Requirements:
    labels = {
        k: draw(st.sampled_from(v))
        for k, v in LABEL_PATTERNS.items()
        if draw(st.integers(0, 3)) == 0
    }
    return Requirements(
        target=draw(st.sampled_from(["worker", "local", "auto", "auto"])),
        labels=labels,
        gpu_count=draw(st.sampled_from([0, 1, 1, 1, 2, 4, 8])),
        min_vram_gb=draw(st.sampled_from([None, None, 0.0, 24.0, 40.0, 80.0])),
        gpu_name=draw(st.sampled_from([None, None, None, "*a100*", "*H100*", "NVIDIA A10"])),
        command=draw(st.sampled_from(JOB_COMMANDS)),
        loader_env=draw(st.sampled_from([(), (), (), ("LD_PRELOAD",)])),
    )


@st.composite
def job_mixes(draw: st.DrawFn) -> list[PendingJob]:
    # A few shared requirement shapes, like a real queue, plus some one-offs.
    shapes = draw(st.lists(requirements(), min_size=1, max_size=4))
    count = draw(st.integers(0, 16))
    seqs = draw(st.lists(st.integers(1, 1000), min_size=count, max_size=count, unique=True))
    return [
        PendingJob(
            job_id=f"j_{seq}",
            priority=draw(st.integers(0, 3)),
            seq=seq,
            requirements=draw(st.one_of(st.sampled_from(shapes), requirements())),
        )
        for seq in seqs
    ]


def fit_order(worker: WorkerView) -> tuple[int, float, str]:
    """Best fit, written out here so a change to the module's own ordering is caught."""
    vram = 0.0 if worker.gpu_vram_gb is None else worker.gpu_vram_gb
    return (worker.gpu_count, vram, worker.worker_id)


def queue_order(jobs: Sequence[PendingJob]) -> list[PendingJob]:
    return sorted(jobs, key=lambda j: (-j.priority, j.seq, j.job_id))


def naive_plan(pending: Sequence[PendingJob], idle: Sequence[WorkerView]) -> list[tuple[str, str]]:
    """The policy written the obvious O(jobs x workers) way, as the oracle."""
    free = {w.worker_id: w for w in idle}
    placements = []
    for job in queue_order(pending):
        candidates = [w for w in free.values() if unmet(job.requirements, w) is None]
        if job.requirements.target == "auto":
            candidates = [w for w in candidates if not w.is_local] or candidates
        if candidates:
            best = min(candidates, key=fit_order)
            del free[best.worker_id]
            placements.append((job.job_id, best.worker_id))
    return placements


def replay(
    pending: Sequence[PendingJob], idle: Sequence[WorkerView], placements: list[tuple[str, str]]
) -> list[tuple[PendingJob, WorkerView | None, list[WorkerView]]]:
    """Per job in queue order: (job, the worker it got or None, the free workers at its turn)."""
    given = dict(placements)
    by_id = {w.worker_id: w for w in idle}
    free = list(by_id.values())
    turns = []
    for job in queue_order(pending):
        chosen = by_id.get(given[job.job_id]) if job.job_id in given else None
        turns.append((job, chosen, list(free)))
        if chosen is not None:
            free.remove(chosen)
    return turns


def check_every_placement_qualifies_and_nothing_is_used_twice(
    idle: list[WorkerView], pending: list[PendingJob], placements: list[tuple[str, str]]
) -> None:
    """Every (job, worker) has unmet() None; no job and no worker appears twice."""
    jobs = {j.job_id: j for j in pending}
    workers = {w.worker_id: w for w in idle}
    for job_id, worker_id in placements:
        assert unmet(jobs[job_id].requirements, workers[worker_id]) is None
    assert len({j for j, _ in placements}) == len(placements)
    assert len({w for _, w in placements}) == len(placements)


def check_a_skipped_job_loses_no_qualifying_worker_to_a_job_behind_it(
    idle: list[WorkerView], pending: list[PendingJob], placements: list[tuple[str, str]]
) -> None:
    """Priority, then FIFO: if job U is left unplaced, every worker given to a job after U
    in queue order fails U's requirements (so it was never U's to take)."""
    turns = replay(pending, idle, placements)
    for rank, (skipped, chosen, _) in enumerate(turns):
        if chosen is not None:
            continue
        for _, their_worker, _ in turns[rank + 1 :]:
            if their_worker is not None:
                assert unmet(skipped.requirements, their_worker) is not None


def check_plan_is_maximal(
    idle: list[WorkerView], pending: list[PendingJob], placements: list[tuple[str, str]]
) -> None:
    """After the pass, no unplaced job qualifies for any worker still free."""
    placed = {j for j, _ in placements}
    taken = {w for _, w in placements}
    still_free = [w for w in idle if w.worker_id not in taken]
    for job in pending:
        if job.job_id not in placed:
            assert all(unmet(job.requirements, w) is not None for w in still_free)


def check_auto_takes_the_local_runner_only_when_no_free_remote_worker_qualifies(
    idle: list[WorkerView], pending: list[PendingJob], placements: list[tuple[str, str]]
) -> None:
    """An auto job placed on the local runner had no qualifying remote worker free at its turn."""
    for job, chosen, free in replay(pending, idle, placements):
        if job.requirements.target == "auto" and chosen is not None and chosen.is_local:
            remote = [w for w in free if not w.is_local]
            assert all(unmet(job.requirements, w) is not None for w in remote)


def check_the_chosen_worker_is_the_best_fit_at_the_time_of_choice(
    idle: list[WorkerView], pending: list[PendingJob], placements: list[tuple[str, str]]
) -> None:
    """Among qualifying workers free at the job's turn, on the side it was placed (remote or
    local), the chosen one has the fewest GPUs, and is first in (GPUs, VRAM, id) order."""
    for job, chosen, free in replay(pending, idle, placements):
        if chosen is None:
            continue
        same_side = [w for w in free if w.is_local == chosen.is_local]
        qualifying = [w for w in same_side if unmet(job.requirements, w) is None]
        assert chosen.gpu_count == min(w.gpu_count for w in qualifying)
        assert fit_order(chosen) == min(fit_order(w) for w in qualifying)


def check_plan_equals_the_naive_policy(
    idle: list[WorkerView], pending: list[PendingJob], placements: list[tuple[str, str]]
) -> None:
    """The indexed plan gives exactly what the obvious O(jobs x workers) policy gives."""
    assert placements == naive_plan(pending, idle)


PLAN_PROPERTIES = [
    check_every_placement_qualifies_and_nothing_is_used_twice,
    check_a_skipped_job_loses_no_qualifying_worker_to_a_job_behind_it,
    check_plan_is_maximal,
    check_auto_takes_the_local_runner_only_when_no_free_remote_worker_qualifies,
    check_the_chosen_worker_is_the_best_fit_at_the_time_of_choice,
    check_plan_equals_the_naive_policy,
]


@EXAMPLES
@given(fleets(), job_mixes())
def test_plan_properties(idle: list[WorkerView], pending: list[PendingJob]) -> None:
    # One generated case feeds every property: generation is the expensive part.
    placements = plan(pending, idle)
    # A worker with no open stream is never chosen, and is as good as absent: the plan
    # is the one for the connected workers alone, so every property is judged on those.
    reachable = [w for w in idle if w.connected]
    disconnected = {w.worker_id for w in idle if not w.connected}
    assert not {w for _, w in placements} & disconnected
    assert placements == plan(pending, reachable)
    for check in PLAN_PROPERTIES:
        check(reachable, pending, placements)


@EXAMPLES
@given(fleets(), job_mixes(), st.lists(st.booleans(), min_size=12, max_size=12))
def test_wait_reason_agrees_with_plan(
    fleet: list[WorkerView], pending: list[PendingJob], idle_mask: list[bool]
) -> None:
    """A job left pending by a pass is told "busy" exactly when some connected worker
    qualifies, and is told of every qualifying worker that is not connected."""
    idle = [w for w, is_idle in zip(fleet, idle_mask, strict=False) if is_idle and w.connected]
    placements = plan(pending, idle)
    taken = {w for _, w in placements}
    idle_after = {w.worker_id for w in idle} - taken
    placed = {j for j, _ in placements}
    for job in pending:
        if job.job_id in placed:
            continue
        reason = wait_reason(job.requirements, fleet, idle_after)
        matching = [w for w in fleet if unmet(job.requirements, w) is None]
        qualifying = [w for w in matching if w.connected]
        absent = sorted(w.worker_id for w in matching if not w.connected and w.hardware_known)
        req = job.requirements
        maybe = [  # never registered: judged on the target and labels alone
            w
            for w in fleet
            if not w.hardware_known
            and (req.target == "auto" or (req.target == "local") == w.is_local)
            and all(label_matches(w.labels, k, p) for k, p in req.labels.items())
        ]
        # Right after a pass nothing idle qualifies, so the reason is never "imminent".
        assert "dispatch is imminent" not in reason
        assert reason.startswith("every qualifying worker is busy") == bool(qualifying)
        assert not {w.worker_id for w in qualifying} & idle_after
        said_absent = " is not connected" in reason or " are not connected" in reason
        assert said_absent == bool(absent)
        assert ("may match but" in reason) == bool(maybe and not absent)
        if absent and not qualifying:
            assert reason.startswith("matching worker") and absent[0] in reason


def test_a_large_mixed_queue_matches_the_naive_policy() -> None:
    # Big enough to exercise the skip links and shared cursors over long runs.
    rng = random.Random(7)
    idle = [
        WorkerView(
            worker_id=f"w_{i:04}",
            is_local=i == 0,
            labels={"gpu_type": rng.choice(LABEL_VALUES["gpu_type"]), "zone": f"z{i % 3}"},
            gpu_count=rng.choice([1, 1, 2, 4, 8]),
            gpu_vram_gb=rng.choice([24.0, 40.0, 80.0]),
            gpu_name=rng.choice(GPU_NAMES),
        )
        for i in range(300)
    ]
    shapes = [
        Requirements(rng.choice(["worker", "auto"]), gpu_count=rng.choice([1, 2, 4]))
        for _ in range(5)
    ] + [
        Requirements("worker", {"gpu_type": "a100*"}, 1, 40.0),
        Requirements("auto", {"zone": "z1"}, 2, None, "*h100*"),
        Requirements("local", gpu_count=1),
        Requirements("worker", gpu_count=16),
    ]
    pending = [PendingJob(f"j_{i}", rng.randint(0, 2), i, rng.choice(shapes)) for i in range(600)]
    placements = plan(pending, idle)
    assert placements == naive_plan(pending, idle)
    assert 100 < len(placements) <= 300


# --- a worker to avoid (it never acknowledged the job's last dispatch) --------------------


@EXAMPLES
@given(fleets(), job_mixes(), st.data())
def test_a_job_avoids_its_unacknowledging_worker_but_never_waits_for_another(
    idle: list[WorkerView], plain: list[PendingJob], data: st.DataObject
) -> None:
    reachable = [w for w in idle if w.connected]
    ids = [w.worker_id for w in idle] or ["w_gone"]
    pending = [
        replace(job, avoid=data.draw(st.frozensets(st.sampled_from(ids), max_size=2)))
        for job in plain
    ]
    placements = plan(pending, reachable)
    assert placements == plan(pending, IdleWorkers(reachable))  # both entry points agree
    check_every_placement_qualifies_and_nothing_is_used_twice(reachable, pending, placements)
    check_plan_is_maximal(reachable, pending, placements)
    # Never blocks: every job placed without the preference is placed with it.
    assert {j for j, _ in plan(plain, reachable)} <= {j for j, _ in placements}
    # A job given the worker it avoids had no other choice: no worker left free fits it.
    taken = {w for _, w in placements}
    still_free = [w for w in reachable if w.worker_id not in taken]
    for job_id, worker_id in placements:
        job = next(j for j in pending if j.job_id == job_id)
        if worker_id in job.avoid:
            assert all(
                unmet(job.requirements, w) is not None or w.worker_id in job.avoid
                for w in still_free
            )


def test_a_worker_one_avoiding_job_gives_up_is_free_for_another() -> None:
    """j_1 leaves w_0 (which it avoids) for w_6; w_0 is then free, and j_2, on the w_7 it
    avoids, moves there (hypothesis found the case where it stayed on w_7)."""
    anything = Requirements("worker", gpu_count=0)
    workers = [WorkerView("w_0"), WorkerView("w_6", gpu_vram_gb=16.0), WorkerView("w_7")]
    plain = [PendingJob("j_1", 0, 1, anything), PendingJob("j_2", 0, 2, anything)]
    assert plan(plain, workers) == [("j_1", "w_0"), ("j_2", "w_7")]
    avoiding = [
        replace(plain[0], avoid=frozenset({"w_0"})),
        replace(plain[1], avoid=frozenset({"w_7"})),
    ]
    assert plan(avoiding, workers) == [("j_1", "w_6"), ("j_2", "w_0")]
    assert plan(avoiding, IdleWorkers(workers)) == [("j_1", "w_6"), ("j_2", "w_0")]
    # The other way round: j_2's move frees the only other worker j_1 fits, so the moves
    # go round again (j_1 came first and found none the first time).
    in_zone_a = Requirements("worker", {"zone": "a"}, gpu_count=0)
    workers = [
        WorkerView("w_a1", labels={"zone": "a"}),
        WorkerView("w_a2", labels={"zone": "a"}),
        WorkerView("w_big", gpu_count=2),
    ]
    plain = [PendingJob("j_1", 0, 1, in_zone_a), PendingJob("j_2", 0, 2, anything)]
    assert plan(plain, workers) == [("j_1", "w_a1"), ("j_2", "w_a2")]
    avoiding = [
        replace(plain[0], avoid=frozenset({"w_a1"})),
        replace(plain[1], avoid=frozenset({"w_a2"})),
    ]
    assert plan(avoiding, workers) == [("j_1", "w_a2"), ("j_2", "w_big")]


@EXAMPLES
@given(fleets(), job_mixes(), st.data())
def test_a_job_never_goes_to_a_worker_it_excludes(
    idle: list[WorkerView], plain: list[PendingJob], data: st.DataObject
) -> None:
    """A retry that must wait for another worker (the scheduler sets ``exclude`` while one
    fits) is never placed on the workers it failed on; other jobs still are."""
    reachable = [w for w in idle if w.connected]
    ids = [w.worker_id for w in idle] or ["w_gone"]
    pending = [
        replace(job, exclude=data.draw(st.frozensets(st.sampled_from(ids), max_size=2)))
        for job in plain
    ]
    placements = plan(pending, reachable)
    assert placements == plan(pending, IdleWorkers(reachable))
    check_every_placement_qualifies_and_nothing_is_used_twice(reachable, pending, placements)
    by_id = {job.job_id: job for job in pending}
    for job_id, worker_id in placements:
        assert worker_id not in by_id[job_id].exclude


def test_an_avoiding_job_moves_only_to_a_worker_nobody_was_given() -> None:
    small = WorkerView("w_small", labels={"zone": "a"}, gpu_count=1)
    big = WorkerView("w_big", gpu_count=2)
    retried = PendingJob("j_1", 0, 1, Requirements("worker"), avoid=frozenset({"w_small"}))
    assert plan([retried], [small, big]) == [("j_1", "w_big")]
    # Only the avoided worker fits: the job goes there rather than wait.
    assert plan([retried], [small]) == [("j_1", "w_small")]
    # No job loses its worker to the preference: w_big is the only one j_2 fits.
    needs_two = PendingJob("j_2", 0, 2, Requirements("worker", gpu_count=2))
    assert plan([retried, needs_two], [small, big]) == [("j_1", "w_small"), ("j_2", "w_big")]
    # The worker given up goes to a job that had none: j_2 fits only w_small.
    in_zone_a = PendingJob("j_2", 0, 2, Requirements("worker", {"zone": "a"}))
    assert plan([retried, in_zone_a], [small, big]) == [("j_1", "w_big"), ("j_2", "w_small")]
