"""The per-pass index plan() walks: idle workers in best-fit order, with fast skipping.

Kept apart from matching.py, which holds the policy and the wording; this file only has
to be fast and agree with ``unmet()`` (the property tests check that it does).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from tunefleet.actors.matching import WorkerView


class RequirementsKey(NamedTuple):
    """Requirements in hashable, normalised form (GPU name lower-cased, labels sorted)."""

    target: str
    gpu_count: int
    min_vram_gb: float | None
    gpu_name: str | None
    labels: tuple[tuple[str, str], ...]


def gpu_name_matches(name: str | None, lowered_pattern: str) -> bool:
    # Case-insensitive: people write "h100*" and "H100*" for the same card.
    return name is not None and fnmatchcase(name.lower(), lowered_pattern)


def label_matches(labels: Mapping[str, str], key: str, pattern: str) -> bool:
    value = labels.get(key)
    # str(): agents send labels as JSON, so a number can slip in; compare it as text.
    return value is not None and fnmatchcase(str(value), pattern)


def fit_order(worker: WorkerView) -> tuple[int, float, str]:
    """Best fit first: fewest GPUs, then least VRAM (unknown counts as none), then id."""
    vram = worker.gpu_vram_gb if worker.gpu_vram_gb is not None else 0.0
    return (worker.gpu_count, vram, worker.worker_id)


def fits(key: RequirementsKey, worker: WorkerView) -> bool:
    """unmet() is None, minus the target check (each pool holds one kind of worker)."""
    if worker.gpu_count < key.gpu_count:
        return False
    if key.min_vram_gb is not None and (
        worker.gpu_vram_gb is None or worker.gpu_vram_gb < key.min_vram_gb
    ):
        return False
    if key.gpu_name is not None and not gpu_name_matches(worker.gpu_name, key.gpu_name):
        return False
    return all(label_matches(worker.labels, k, p) for k, p in key.labels)


class WorkerPool:
    """Idle workers of one kind (remote or local) in best-fit order, for one plan() call.

    A job's search starts at the first worker with enough GPUs (bisect) and walks right;
    taken workers are skipped through "next free" links with path halving, so a long run
    of taken workers costs near O(1) instead of a scan.
    """

    __slots__ = ("_counts", "_label_values", "_max_vram", "_names", "_next", "workers")

    def __init__(self, workers: list[WorkerView]) -> None:
        self.workers = sorted(workers, key=fit_order)
        self._counts = [w.gpu_count for w in self.workers]
        # _next[i] == i while worker i is free; a taken one points further right.
        self._next = list(range(len(self.workers) + 1))
        self._label_values: dict[str, set[str]] = {}
        for worker in self.workers:
            for k, v in worker.labels.items():
                self._label_values.setdefault(k, set()).add(str(v))
        known = [w.gpu_vram_gb for w in self.workers if w.gpu_vram_gb is not None]
        self._max_vram = max(known, default=None)
        self._names = {w.gpu_name.lower() for w in self.workers if w.gpu_name}

    def __len__(self) -> int:
        return len(self.workers)

    def start_for(self, key: RequirementsKey) -> int:
        """Where the search for ``key`` begins; the end when no worker here can ever fit."""
        return bisect_left(self._counts, key.gpu_count) if self._could_fit(key) else len(self)

    def _could_fit(self, key: RequirementsKey) -> bool:
        # Cheap whole-pool checks, so a key that fits nobody costs no scan at all.
        if key.min_vram_gb is not None and (
            self._max_vram is None or self._max_vram < key.min_vram_gb
        ):
            return False
        if key.gpu_name is not None and not any(
            fnmatchcase(name, key.gpu_name) for name in self._names
        ):
            return False
        for k, pattern in key.labels:
            values = self._label_values.get(k)
            if values is None or (not _is_glob(pattern) and pattern not in values):
                return False
        return True

    def next_fit(self, start: int, key: RequirementsKey) -> int:
        """Index of the first free worker at or after ``start`` that fits; len if none."""
        end = len(self.workers)
        index = self._first_free(start)
        while index < end and not fits(key, self.workers[index]):
            index = self._first_free(index + 1)
        return index

    def take(self, index: int) -> None:
        self._next[index] = index + 1

    def _first_free(self, index: int) -> int:
        links = self._next
        while links[index] != index:
            links[index] = links[links[index]]
            index = links[index]
        return index


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")
