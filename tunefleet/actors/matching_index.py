"""The index one plan() call builds over the idle workers, so placing a job is cheap.

Kept apart from matching.py, which holds the policy and the wording; this file only has
to be fast and agree with ``unmet()`` (the property tests check that it does).

Shape: workers are ranked once in best-fit order. The label and GPU-name globs of a job
pick a *shortlist* (found through an inverted index of label values, then cached for
every job with the same globs); a shortlist is split into buckets by GPU count, each
sorted by VRAM. A job then looks at the buckets with enough GPUs, bisects to its VRAM
floor and takes the first free worker, following "next free" links that skip taken
workers in near-constant time. Placing a job costs about one bisect per GPU-count
bucket, whatever the number of workers or of distinct requirements.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from tunefleet.actors.matching import WorkerView

from tunefleet.commands import refusal

# Which sides of the fleet a target may use, in order of preference.
SIDES = {"worker": (False,), "local": (True,), "auto": (False, True)}


class RequirementsKey(NamedTuple):
    """Requirements in hashable, normalised form (GPU name lower-cased, labels sorted)."""

    target: str
    gpu_count: int
    min_vram_gb: float | None
    gpu_name: str | None
    labels: tuple[tuple[str, str], ...]
    # The job's own command (None: the worker's default) and the loader env names it
    # sets; a worker that reported --allowed-commands must allow them.
    command: tuple[str, ...] | None = None
    loader_env: tuple[str, ...] = ()


@lru_cache(maxsize=4096)  # a fleet has a handful of GPU names; explanations ask per worker
def gpu_name_matches(name: str | None, lowered_pattern: str) -> bool:
    # Case-insensitive: people write "h100*" and "H100*" for the same card.
    return name is not None and fnmatchcase(name.lower(), lowered_pattern)


def label_matches(labels: Mapping[str, str], key: str, pattern: str) -> bool:
    value = labels.get(key)
    # str(): agents send labels as JSON, so a number can slip in; compare it as text.
    return value is not None and fnmatchcase(str(value), pattern)


@lru_cache(maxsize=4096)  # few distinct commands and allow-lists in a fleet
def command_refusal(
    allowed: tuple[str, ...] | None, command: tuple[str, ...] | None, loader_env: tuple[str, ...]
) -> str | None:
    """Why a worker allowing ``allowed`` would refuse the job (the agent's own rule), or
    None. A job on the worker's default command with no loader env is never refused."""
    if allowed is None or (command is None and not loader_env):
        return None
    return refusal(command, loader_env, allowed)


def fit_order(worker: WorkerView) -> tuple[int, float, str]:
    """Best fit first: fewest GPUs, then least VRAM (unknown counts as none), then id."""
    return (worker.gpu_count, _vram(worker), worker.worker_id)


def fits(key: RequirementsKey, worker: WorkerView) -> bool:
    """unmet() is None, without the target rule and without building a sentence."""
    if worker.gpu_count < key.gpu_count:
        return False
    if key.min_vram_gb is not None and (
        worker.gpu_vram_gb is None or worker.gpu_vram_gb < key.min_vram_gb
    ):
        return False
    if key.gpu_name is not None and not gpu_name_matches(worker.gpu_name, key.gpu_name):
        return False
    if command_refusal(worker.allowed_commands, key.command, key.loader_env) is not None:
        return False
    return all(label_matches(worker.labels, k, p) for k, p in key.labels)


def _vram(worker: WorkerView) -> float:
    return worker.gpu_vram_gb if worker.gpu_vram_gb is not None else 0.0


def _is_glob(pattern: str) -> bool:
    # Without these, fnmatchcase(value, pattern) is plain equality.
    return any(c in pattern for c in "*?[")


class _Bucket:
    """Shortlisted workers with one GPU count, by (VRAM, id), with "next free" links."""

    __slots__ = ("gpu_count", "links", "ranks", "vrams")

    def __init__(self, gpu_count: int) -> None:
        self.gpu_count = gpu_count
        self.ranks: list[int] = []
        self.vrams: list[float] = []
        self.links: list[int] = []

    def first_free(self, start: int, taken: bytearray) -> int:
        """Index of the first worker at or after ``start`` not taken yet; len if none."""
        links, ranks, end = self.links, self.ranks, len(self.ranks)
        index = start
        while True:
            while links[index] != index:  # path halving keeps later walks short
                links[index] = links[links[index]]
                index = links[index]
            if index == end or not taken[ranks[index]]:
                return index
            links[index] = index + 1  # taken through another shortlist: skip it from now on


class _Shortlist:
    __slots__ = ("buckets", "counts")

    def __init__(self, ranks: Iterable[int], workers: list[WorkerView]) -> None:
        self.buckets: list[_Bucket] = []
        for rank in sorted(ranks):  # rank order is best-fit order: grouped by GPU count
            worker = workers[rank]
            if not self.buckets or self.buckets[-1].gpu_count != worker.gpu_count:
                self.buckets.append(_Bucket(worker.gpu_count))
            self.buckets[-1].ranks.append(rank)
            self.buckets[-1].vrams.append(_vram(worker))
        for bucket in self.buckets:
            bucket.links = list(range(len(bucket.ranks) + 1))
        self.counts = [b.gpu_count for b in self.buckets]

    def best(self, gpu_count: int, min_vram_gb: float | None, taken: bytearray) -> int | None:
        for bucket in self.buckets[bisect_left(self.counts, gpu_count) :]:
            start = 0 if min_vram_gb is None else bisect_left(bucket.vrams, min_vram_gb)
            index = bucket.first_free(start, taken)
            if index < len(bucket.ranks):
                return bucket.ranks[index]
        return None


class FleetIndex:
    """The idle workers of one plan() call; ``take`` marks one as given away."""

    __slots__ = ("_labels", "_names", "_shortlists", "_sides", "free", "taken", "workers")

    def __init__(self, workers: Iterable[WorkerView]) -> None:
        self.workers = sorted(workers, key=fit_order)
        self.taken = bytearray(len(self.workers))
        self.free = len(self.workers)
        self._sides: dict[bool, set[int]] = {False: set(), True: set()}
        self._labels: dict[str, dict[str, set[int]]] = {}
        self._names: dict[str, set[int]] = {}
        for rank, worker in enumerate(self.workers):
            self._sides[worker.is_local].add(rank)
            for key, value in worker.labels.items():
                self._labels.setdefault(key, {}).setdefault(str(value), set()).add(rank)
            if worker.gpu_name is not None:
                self._names.setdefault(worker.gpu_name.lower(), set()).add(rank)
        self._shortlists: dict[tuple[object, ...], _Shortlist] = {}

    def best_for(self, key: RequirementsKey) -> int | None:
        """Rank of the best free worker for ``key`` (remote first for auto); None if none."""
        for is_local in SIDES[key.target]:
            found = self._shortlist(is_local, key).best(key.gpu_count, key.min_vram_gb, self.taken)
            if found is not None:
                return found
        return None

    def take(self, rank: int) -> None:
        self.taken[rank] = 1
        self.free -= 1

    def _shortlist(self, is_local: bool, key: RequirementsKey) -> _Shortlist:
        globs = (is_local, key.labels, key.gpu_name, key.command, key.loader_env)
        shortlist = self._shortlists.get(globs)
        if shortlist is None:
            shortlist = _Shortlist(self._matching(is_local, key), self.workers)
            self._shortlists[globs] = shortlist
        return shortlist

    def _matching(self, is_local: bool, key: RequirementsKey) -> set[int]:
        """Ranks on one side whose labels and GPU name match the key's globs."""
        wanted = [self._sides[is_local]]
        for label, pattern in key.labels:
            wanted.append(_lookup(self._labels.get(label, {}), pattern))
        if key.gpu_name is not None:
            wanted.append(_lookup(self._names, key.gpu_name))
        wanted.sort(key=len)
        found = wanted[0].intersection(*wanted[1:])
        if key.command is None and not key.loader_env:
            return found
        return {
            rank
            for rank in found
            if command_refusal(self.workers[rank].allowed_commands, key.command, key.loader_env)
            is None
        }


def _lookup(index: dict[str, set[int]], pattern: str) -> set[int]:
    if not _is_glob(pattern):
        return index.get(pattern, set())
    # Globs are matched against distinct values, usually far fewer than workers.
    return set().union(*(ranks for value, ranks in index.items() if fnmatchcase(value, pattern)))
