"""Why a job still waits: one line for the person who submitted it.

Pure functions over the scheduler's views, like matching.py. A worker that is registered
but has no open stream (not yet connected, or its stream closed and it has not come
back) never takes a job, but it is not absent either: when one qualifies, the reason
says so instead of claiming that nothing matches.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Mapping, Sequence

from tunefleet.actors.matching import Requirements, WorkerView, _gb, _gpus, unmet
from tunefleet.actors.matching_index import (
    SIDES,
    RequirementsKey,
    command_refusal,
    fits,
    gpu_name_matches,
    label_matches,
)

# How many worker ids a wait reason lists before it says "and N more".
_LISTED_WORKERS = 5


# --- why a job waits ------------------------------------------------------------------


class WaitReasons:
    """wait_reason over a fleet that changes far less often than its idle set: per
    requirements, the qualifying connected workers and the reason when none of them is
    idle are kept until ``forget`` (a worker's view changed). Each question then costs
    a look at the idle set, not a walk of the fleet (3 µs a worker)."""

    _KEPT = 1024  # requirement shapes remembered at once; a queue has a handful

    def __init__(self) -> None:
        self._known: dict[object, tuple[list[str], str]] = {}

    def forget(self) -> None:
        self._known.clear()

    def reason(
        self, req: Requirements, fleet: Callable[[], Sequence[WorkerView]], idle: Container[str]
    ) -> str:
        """``wait_reason(req, fleet(), idle)``; ``fleet`` is called only when not known."""
        # The reason quotes the GPU name and labels as written: the key normalises them.
        shape = (req.key(), req.gpu_name, tuple(req.labels.items()))
        known = self._known.get(shape)
        if known is None:
            if len(self._known) >= self._KEPT:
                self._known.clear()
            views = fleet()
            known = self._known[shape] = (_qualifying(req, views), wait_reason(req, views, ()))
        qualifying, when_none_idle = known
        for worker_id in qualifying:
            if worker_id in idle:
                return _imminent(worker_id)
        return when_none_idle


def _qualifying(req: Requirements, fleet: Sequence[WorkerView]) -> list[str]:
    """Connected workers on the job's side that meet every requirement, by id: those
    whose being idle makes the reason "dispatch is imminent"."""
    key = req.key()
    sides = SIDES[req.target]
    return sorted(
        w.worker_id for w in fleet if w.connected and w.is_local in sides and fits(key, w)
    )


def _imminent(worker_id: str) -> str:
    # Only between events: the next matching pass dispatches it.
    return f"qualifying worker {worker_id} is idle; dispatch is imminent"


def wait_reason(req: Requirements, fleet: Sequence[WorkerView], idle_ids: Collection[str]) -> str:
    """One line saying why a job with ``req`` is not running, for the person who submitted it.

    ``fleet`` is every known worker that is not offline: connected ones (idle, busy or
    draining) and registered ones with no open stream (``connected=False``); ``idle_ids``
    are those that may take a job now.
    """
    live = [w for w in fleet if w.connected]
    reason, busy = _reason_among_connected(req, live, idle_ids)
    if busy is None and reason.endswith("dispatch is imminent"):
        return reason
    key = req.key()
    sides = SIDES[req.target]
    away = [w for w in fleet if not w.connected and w.is_local in sides]
    absent = sorted(w.worker_id for w in away if w.hardware_known and fits(key, w))
    if not absent:
        # Never registered: only its admin labels are known, its GPUs not until it connects.
        maybe = sorted(
            w.worker_id
            for w in away
            if not w.hardware_known and all(label_matches(w.labels, k, p) for k, p in key.labels)
        )
        if not maybe:
            return reason
        one = len(maybe) == 1
        waiting = (
            f"worker {maybe[0]} may match but has not connected yet "
            "(its GPUs are not known until it does)"
            if one
            else f"workers {_list_ids(maybe)} may match but have not connected yet "
            "(their GPUs are not known until they do)"
        )
        if busy is not None:
            return f"{reason}; {waiting}"
        return f"{waiting}; the job may start when {'it' if one else 'one'} connects"
    one = len(absent) == 1
    if busy is not None:
        verb = "matches but is" if one else "match but are"
        return f"{reason}; {_list_ids(absent)} {verb} not connected"
    # What the connected fleet lacks is beside the point: a matching worker exists.
    who = f"matching worker {absent[0]} is" if one else f"matching workers {_list_ids(absent)} are"
    return (
        f"{who} not connected (registered, no open stream); "
        f"the job starts when {'it' if one else 'one'} connects"
    )


def _reason_among_connected(
    req: Requirements, live: Sequence[WorkerView], idle_ids: Collection[str]
) -> tuple[str, list[str] | None]:
    """The reason judged on connected workers, and the busy qualifying ones if that is why."""
    eligible, missing = _eligible(req, live)
    if missing is not None:
        return missing, None
    problems = _fleet_wide_problems(req, eligible)
    if problems:
        return "; ".join(problems), None
    key = req.key()  # eligible is already on the target's side; fits() checks the rest
    qualifying = sorted((w for w in eligible if fits(key, w)), key=lambda w: w.worker_id)
    if not qualifying:
        closest = min(eligible, key=lambda w: (_count_unmet(key, w), w.worker_id))
        return (
            "no single worker meets every requirement "
            f"(closest is {closest.worker_id}: {unmet(req, closest)})"
        ), None
    idle = [w.worker_id for w in qualifying if w.worker_id in idle_ids]
    if idle:
        return _imminent(idle[0]), None
    busy = [w.worker_id for w in qualifying if w.quarantine_reason is None]
    held = [w for w in qualifying if w.quarantine_reason is not None]
    if not held:
        return "every qualifying worker is busy or draining: " + _list_ids(busy), busy
    # A bad machine takes no job (failures there: actors/quarantine_policy.py; an unhealthy
    # GPU reading: worker_health.py; or an admin): say so, with why.
    parts = [f"{w.worker_id} quarantined: {w.quarantine_reason}" for w in held[:_LISTED_WORKERS]]
    if len(held) > _LISTED_WORKERS:
        parts.append(f"{len(held) - _LISTED_WORKERS} more quarantined")
    if busy:
        parts.insert(0, "qualifying workers busy or draining: " + _list_ids(busy))
    return "; ".join(parts), [w.worker_id for w in qualifying]


def _eligible(
    req: Requirements, fleet: Sequence[WorkerView]
) -> tuple[list[WorkerView], str | None]:
    if req.target == "local":
        eligible = [w for w in fleet if w.is_local]
        if not eligible:
            return eligible, (
                "target local but the orchestrator has no local runner "
                "(start the server with --local-runner, or submit with target worker or auto)"
            )
        return eligible, None
    if req.target == "worker":
        eligible = [w for w in fleet if not w.is_local]
        if not eligible and fleet:
            return eligible, (
                "no remote worker is connected; target worker never uses the orchestrator's "
                "local runner (use target auto to allow it)"
            )
    else:
        eligible = list(fleet)
    if not eligible:
        return eligible, "no worker is connected (start one with `tunefleet worker`)"
    return eligible, None


def _fleet_wide_problems(req: Requirements, eligible: list[WorkerView]) -> list[str]:
    """Requirements that no eligible worker meets even when judged one at a time."""
    largest = {
        "local": "the local runner",
        "worker": "the largest remote worker" if len(eligible) > 1 else "the only remote worker",
        "auto": "the largest worker" if len(eligible) > 1 else "the only worker",
    }[req.target]
    problems = []
    most_gpus = max(w.gpu_count for w in eligible)
    if most_gpus < req.gpu_count:
        problems.append(f"needs {_gpus(req.gpu_count)}; {largest} has {most_gpus}")
    if req.min_vram_gb:
        known = [w.gpu_vram_gb for w in eligible if w.gpu_vram_gb is not None]
        if not known:
            problems.append(f"min VRAM {_gb(req.min_vram_gb)}; no worker reports its VRAM")
        elif max(known) < req.min_vram_gb:
            problems.append(f"min VRAM {_gb(req.min_vram_gb)}; {largest} has {_gb(max(known))}")
    if req.gpu_name:
        problem = _gpu_name_problem(req.gpu_name, eligible)
        if problem is not None:
            problems.append(problem)
    if req.labels:
        problem = _labels_problem(req.labels, eligible)
        if problem is not None:
            problems.append(problem)
    return problems


def _gpu_name_problem(pattern: str, eligible: list[WorkerView]) -> str | None:
    lowered = pattern.lower()
    if any(gpu_name_matches(w.gpu_name, lowered) for w in eligible):
        return None
    names = sorted({w.gpu_name for w in eligible if w.gpu_name})
    if not names:
        return f"no GPU named {pattern!r} (no worker reports a GPU name)"
    reason = f"no GPU named {pattern!r} (workers have: {_list_ids(names)})"
    # The glob must match the whole name; "H100*" misses "NVIDIA H100 80GB HBM3".
    wider = (
        ("" if pattern.startswith("*") else "*") + pattern + ("" if pattern.endswith("*") else "*")
    )
    if wider != pattern and any(gpu_name_matches(n, wider.lower()) for n in names):
        reason += f"; the name must match whole, try {wider!r}"
    return reason


def _labels_problem(labels: Mapping[str, str], eligible: list[WorkerView]) -> str | None:
    def matched(w: WorkerView) -> int:
        return sum(label_matches(w.labels, k, p) for k, p in labels.items())

    if any(matched(w) == len(labels) for w in eligible):
        return None
    # Name the labels nobody has, or all of them when only the combination fails.
    hopeless = {
        k: p for k, p in labels.items() if not any(label_matches(w.labels, k, p) for w in eligible)
    }
    shown = hopeless or dict(labels)
    closest = min(
        eligible,
        key=lambda w: (-matched(w), -_shares_keys(w, shown), -_likeness(w, shown), w.worker_id),
    )
    key = next(k for k, p in shown.items() if not label_matches(closest.labels, k, p))
    has = f"has {key}={closest.labels[key]}" if key in closest.labels else f"has no label {key}"
    wanted = ", ".join(f"{k}={p}" for k, p in shown.items())
    plural = "labels" if len(shown) > 1 else "label"
    together = "" if hopeless else " together"
    return f"no worker matches {plural} {wanted}{together} (closest: {closest.worker_id} {has})"


def _shares_keys(worker: WorkerView, labels: Mapping[str, str]) -> int:
    return sum(k in worker.labels for k in labels)


def _likeness(worker: WorkerView, labels: Mapping[str, str]) -> int:
    """Characters the worker's values share with the wanted patterns' starts (a10 ~ a100*)."""
    total = 0
    for key, pattern in labels.items():
        value = str(worker.labels.get(key, ""))
        total += _shared_start(value, pattern)
    return total


def _shared_start(a: str, b: str) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def _count_unmet(key: RequirementsKey, worker: WorkerView) -> int:
    """How many requirements ``worker`` misses (labels count one each)."""
    missing = 0
    for label, pattern in key.labels:  # a plain loop: this runs for every worker in the fleet
        if not label_matches(worker.labels, label, pattern):
            missing += 1
    if worker.gpu_count < key.gpu_count:
        missing += 1
    if key.min_vram_gb is not None and (
        worker.gpu_vram_gb is None or worker.gpu_vram_gb < key.min_vram_gb
    ):
        missing += 1
    if key.gpu_name is not None and not gpu_name_matches(worker.gpu_name, key.gpu_name):
        missing += 1
    if command_refusal(worker.allowed_commands, key.command, key.loader_env) is not None:
        missing += 1
    return missing


def _list_ids(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:_LISTED_WORKERS])
    more = len(ids) - _LISTED_WORKERS
    return f"{shown} and {more} more" if more > 0 else shown


__all__ = ["WaitReasons", "wait_reason"]
