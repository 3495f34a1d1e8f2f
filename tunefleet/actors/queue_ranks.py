"""Where a pending job stands in the queue: priority first, then submission order.

Kept as it changes rather than counted per question: a submission into a queue of
2,000 jobs walked all of it (about 0.2 ms) to say its place; here it is one binary
search among the jobs of its priority and a sum over the few priorities in use.
"""

from __future__ import annotations

from bisect import bisect_left, insort


class QueueRanks:
    """The (priority, seq) of every pending job: per priority, its jobs' seqs sorted."""

    def __init__(self) -> None:
        self._seqs: dict[int, list[int]] = {}

    def add(self, priority: int, seq: int) -> None:
        insort(self._seqs.setdefault(priority, []), seq)

    def remove(self, priority: int, seq: int) -> None:
        seqs = self._seqs.get(priority)
        if seqs is None:
            return
        at = bisect_left(seqs, seq)
        if at < len(seqs) and seqs[at] == seq:
            del seqs[at]
            if not seqs:
                del self._seqs[priority]

    def rank(self, priority: int, seq: int) -> int:
        """1 + how many jobs come before one of this priority and seq: those of a higher
        priority, and those of its own submitted before it."""
        ahead = sum(len(seqs) for p, seqs in self._seqs.items() if p > priority)
        return ahead + bisect_left(self._seqs.get(priority, ()), seq) + 1

    def __len__(self) -> int:
        return sum(len(seqs) for seqs in self._seqs.values())
