"""The idle, connected workers, kept in best-fit order between matching passes.

The scheduler adds and removes one worker at a time (a worker turning idle, a worker
given a job), so keeping them sorted costs one bisect and one list move each, while a
placement walks them best fit first and stops at the first that qualifies. Jobs mostly
arrive one at a time, and the common job (one GPU, few or no labels) fits one of the
first workers it looks at: placing it no longer grows with the fleet. A job few workers
fit still walks far, but never further than the full scan this replaces.

Agrees with ``unmet()`` through ``fits()`` (tests/actors/test_idle_workers.py checks it
against a plain scan, after random joins and departures).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Collection, Iterable, Iterator
from typing import TYPE_CHECKING

from tunefleet.actors.matching_index import SIDES, RequirementsKey, fit_order, fits

if TYPE_CHECKING:
    from tunefleet.actors.matching import WorkerView

FitOrder = tuple[int, float, str]


class IdleWorkers:
    """Workers by id, plus each side's (remote, local) fit order as a sorted list."""

    __slots__ = ("_by_id", "_order")

    def __init__(self, workers: Iterable[WorkerView] = ()) -> None:
        self._by_id: dict[str, WorkerView] = {}
        for worker in workers:  # a repeated id: the last view wins, as in a dict
            if worker.connected:
                self._by_id[worker.worker_id] = worker
            else:
                self._by_id.pop(worker.worker_id, None)
        self._order: dict[bool, list[FitOrder]] = {False: [], True: []}
        for worker in self._by_id.values():
            self._order[worker.is_local].append(fit_order(worker))
        for order in self._order.values():
            order.sort()

    def add(self, worker: WorkerView) -> None:
        """Keep ``worker`` (replacing an older view of it); one without a stream is dropped."""
        self.discard(worker.worker_id)
        if not worker.connected:  # a job written to a stream nobody reads is lost
            return
        self._by_id[worker.worker_id] = worker
        insort(self._order[worker.is_local], fit_order(worker))

    def discard(self, worker_id: str) -> None:
        worker = self._by_id.pop(worker_id, None)
        if worker is None:
            return
        order = self._order[worker.is_local]
        del order[bisect_left(order, fit_order(worker))]

    def best_for(self, key: RequirementsKey, taken: Collection[str] = ()) -> WorkerView | None:
        """The first worker in fit order, not in ``taken``, that qualifies for ``key``
        (a remote one whenever one does, for target auto); None if none does."""
        for is_local in SIDES[key.target]:
            found = self._first_fit(self._order[is_local], key, taken)
            if found is not None:
                return found
        return None

    def _first_fit(
        self, order: list[FitOrder], key: RequirementsKey, taken: Collection[str]
    ) -> WorkerView | None:
        # Workers with too few GPUs, then those below the VRAM floor, are skipped by bisect.
        index = bisect_left(order, (key.gpu_count,))
        floor = key.min_vram_gb
        end = len(order)
        while index < end:
            gpu_count, vram, worker_id = order[index]
            if floor is not None and vram < floor:
                index = bisect_left(order, (gpu_count, floor), index)
                continue
            index += 1
            if worker_id in taken:
                continue
            worker = self._by_id[worker_id]
            if fits(key, worker):
                return worker
        return None

    def values(self) -> Iterable[WorkerView]:
        return self._by_id.values()

    def __contains__(self, worker_id: object) -> bool:
        return worker_id in self._by_id

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)
