"""QueueRanks: a pending job's rank kept through adds and removals, the same as counting
the jobs ahead of it (higher priority, or the same priority and submitted before)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tunefleet.actors.queue_ranks import QueueRanks

_jobs = st.tuples(st.integers(-3, 3), st.integers(1, 40))  # (priority, seq)


def _counted(queue: list[tuple[int, int]], priority: int, seq: int) -> int:
    return 1 + sum(1 for p, s in queue if (-p, s) < (-priority, seq))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), _jobs), max_size=60), _jobs)
def test_rank_is_the_count_of_jobs_ahead_through_adds_and_removals(
    steps: list[tuple[bool, tuple[int, int]]], asked: tuple[int, int]
) -> None:
    order, queue = QueueRanks(), []
    for add, (priority, seq) in steps:
        if add:
            order.add(priority, seq)
            queue.append((priority, seq))
        else:
            order.remove(priority, seq)  # absent: nothing happens
            if (priority, seq) in queue:
                queue.remove((priority, seq))
        for p, s in [*queue, asked]:
            assert order.rank(p, s) == _counted(queue, p, s)
        assert len(order) == len(queue)


def test_higher_priority_first_then_submission_order() -> None:
    order = QueueRanks()
    for priority, seq in [(0, 1), (5, 2), (0, 3), (5, 4)]:
        order.add(priority, seq)
    assert [order.rank(p, s) for p, s in [(0, 1), (5, 2), (0, 3), (5, 4)]] == [3, 1, 4, 2]
    order.remove(5, 2)
    assert [order.rank(p, s) for p, s in [(0, 1), (0, 3), (5, 4)]] == [2, 3, 1]
