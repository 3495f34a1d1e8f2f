"""A preempted job waits at the head of its priority band: property-tested over random
queues through the same plan() the scheduler runs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tunefleet.actors.matching import PendingJob, Requirements, WorkerView, plan
from tunefleet.actors.preemption import HEAD_OF_BAND, queue_seq
from tunefleet.actors.queue_ranks import QueueRanks
from tunefleet.actors.records import JobRecord

JOBS = st.lists(
    st.tuples(st.integers(-3, 3), st.booleans()),  # (priority, last attempt preempted)
    min_size=1,
    max_size=30,
)


def record(seq: int, priority: int, preempted_last: bool) -> JobRecord:
    return JobRecord(
        job_id=f"j_{seq:03d}",
        seq=seq,
        state="pending",
        target="worker",
        config={},
        gpu_count=1,
        priority=priority,
        preempted_last=preempted_last,
    )


def expected_order(records: list[JobRecord]) -> list[str]:
    """The documented order, written independently: priority (high first), then preempted
    jobs before the others, then submission order."""
    ranked = sorted(records, key=lambda r: (-r.priority, not r.preempted_last, r.seq))
    return [r.job_id for r in ranked]


@given(JOBS, st.integers(1, 40))
def test_the_pass_and_the_ranks_put_preempted_jobs_first_in_their_band(
    jobs: list[tuple[int, bool]], workers: int
) -> None:
    records = [record(seq, p, pre) for seq, (p, pre) in enumerate(jobs, start=1)]
    pending = [
        PendingJob(r.job_id, r.priority, queue_seq(r), Requirements(target="worker"))
        for r in records
    ]
    idle = [WorkerView(f"w_{i:03d}", gpu_count=1) for i in range(workers)]
    placed = [job_id for job_id, _ in plan(pending, idle)]
    order = expected_order(records)
    assert placed == order[: min(workers, len(order))]
    ranks = QueueRanks()
    for job in pending:
        ranks.add(job.priority, job.seq)
    by_rank = sorted(pending, key=lambda j: ranks.rank(j.priority, j.seq))
    assert [j.job_id for j in by_rank] == order


@given(st.integers(1, 2**40))
def test_a_job_leaves_the_head_once_dispatched_again(seq: int) -> None:
    rec = record(seq, 0, preempted_last=True)
    assert queue_seq(rec) == seq - HEAD_OF_BAND < 0
    rec.preempted_last = False
    assert queue_seq(rec) == seq
