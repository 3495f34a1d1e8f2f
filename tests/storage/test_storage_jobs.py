"""Jobs: seq, listing, compare-and-set under racing writers, attempts, timeline, logs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import peewee as pw
import pytest
from storage_testkit import DbTarget, Line, count_attempts_apart_of_a_page, race_to_dispatch

from tunefleet.storage.database import open_database
from tunefleet.storage.errors import AlreadyExists
from tunefleet.storage.models import database_proxy
from tunefleet.storage.store import Repos, Store


def _lines(first: int, count: int, stream: str = "stdout") -> list[Line]:
    return [Line(seq, stream, f"line {seq}", 100.0 + seq) for seq in range(first, first + count)]


async def test_create_assigns_seq_and_keeps_every_field(store: Store, clock: list[float]) -> None:
    job = await store.create_job(
        "j_1",
        config={"model": "flux", "lr": 1e-4, "nested": {"steps": [1, 2]}},
        name="first",
        dataloader=[{"type": "local", "path": "/data"}],
        command=["python", "train.py"],
        env={"WANDB_MODE": "offline"},
        target="worker",
        worker_labels={"gpu": "a100*"},
        gpu_count=2,
        min_vram_gb=40.0,
        priority=5,
        submitted_by="alice",
    )
    assert (job.seq, job.state, job.attempts, job.max_retries) == (1, "pending", 0, 3)
    assert job.config == {"model": "flux", "lr": 1e-4, "nested": {"steps": [1, 2]}}
    assert job.dataloader == [{"type": "local", "path": "/data"}]
    assert (job.command, job.env) == (["python", "train.py"], {"WANDB_MODE": "offline"})
    assert job.submitted_at == job.updated_at == clock[0]
    assert job.progress is None and job.worker_id is None
    assert await store.get_job("j_1") == job
    assert (await store.create_job("j_2", config={})).seq == 2
    assert await store.get_job("j_missing") is None


async def test_duplicate_job_id_and_protected_fields(store: Store) -> None:
    await store.create_job("j_1", config={})
    with pytest.raises(AlreadyExists, match="job j_1 already exists"):
        await store.create_job("j_1", config={})
    with pytest.raises(TypeError, match="cannot be set here"):
        await store.create_job("j_2", config={}, seq=7)
    with pytest.raises(TypeError, match="cannot be set here"):
        await store.update_job("j_1", state="running")
    with pytest.raises(TypeError, match="has no field"):
        await store.update_job("j_1", colour="blue")
    assert await store.count_jobs() == 1


async def test_update_job(store: Store, clock: list[float]) -> None:
    await store.create_job("j_1", config={})
    clock[0] += 1
    assert await store.update_job("j_1", progress={"step": 10, "loss": 0.5}, wait_reason=None)
    job = await store.get_job("j_1")
    assert job is not None
    assert (job.progress, job.updated_at) == ({"step": 10, "loss": 0.5}, clock[0])
    assert not await store.update_job("j_missing", progress={})


async def test_list_filters_order_and_paging(store: Store) -> None:
    for i in range(1, 8):
        await store.create_job(
            f"j_{i}",
            config={},
            target="local" if i % 2 else "worker",
            submitted_by="alice" if i <= 3 else "bob",
        )
    await store.cas_job_state("j_2", "pending", "dispatched", worker_id="w_1")
    await store.cas_job_state("j_4", "pending", "dispatched", worker_id="w_1")
    await store.cas_job_state("j_4", "dispatched", "completed")

    async def ids(**filters: object) -> list[str]:
        return [job.id for job in await store.list_jobs(**filters)]  # type: ignore[arg-type]

    assert await ids() == ["j_7", "j_6", "j_5", "j_4", "j_3", "j_2", "j_1"]
    assert await ids(order="seq", limit=3) == ["j_1", "j_2", "j_3"]
    assert await ids(order="seq", limit=3, offset=3) == ["j_4", "j_5", "j_6"]
    assert await ids(state="pending", target="local") == ["j_7", "j_5", "j_3", "j_1"]
    assert await ids(state=["dispatched", "completed"]) == ["j_4", "j_2"]
    assert await ids(worker_id="w_1", order="seq") == ["j_2", "j_4"]
    assert await ids(submitted_by="alice", target="worker") == ["j_2"]
    assert await store.count_jobs(state="pending") == 5
    assert await store.count_jobs(submitted_by="bob") == 4
    assert await store.job_counts() == {"pending": 5, "dispatched": 1, "completed": 1}
    assert [job.id for job in await store.nonterminal_jobs()] == [
        "j_1", "j_2", "j_3", "j_5", "j_6", "j_7",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="must not be negative"):
        await store.list_jobs(offset=-1)
    assert len(await store.list_jobs(limit=10**9)) == 7  # clamped, not an error


async def test_cas_job_state_refuses_a_stale_expectation(store: Store) -> None:
    await store.create_job("j_1", config={})
    assert await store.cas_job_state("j_1", "pending", "dispatched", worker_id="w_1", attempts=1)
    assert not await store.cas_job_state("j_1", "pending", "dispatched", worker_id="w_2")
    assert await store.cas_job_state("j_1", ["dispatched", "running"], "cancelled")
    job = await store.get_job("j_1")
    assert job is not None
    assert (job.state, job.worker_id, job.attempts) == ("cancelled", "w_1", 1)
    assert not await store.cas_job_state("j_missing", "pending", "dispatched")


async def test_many_concurrent_cas_attempts_have_exactly_one_winner(store: Store) -> None:
    await store.create_job("j_1", config={})
    results = await race_to_dispatch(store, "j_1", 50)
    assert results.count(True) == 1
    job = await store.get_job("j_1")
    assert job is not None and job.worker_id == f"w_{results.index(True)}"


async def test_cas_race_across_two_connections(db_target: DbTarget) -> None:
    """Two Database objects (two connections, as two processes) race for one job."""
    first = await open_database(db_target.url, db_target.data_dir)
    second = await open_database(db_target.url, db_target.data_dir)
    try:
        stores = [Store(first), Store(second)]
        await stores[0].create_job("j_1", config={})
        attempts = [
            stores[i % 2].cas_job_state("j_1", "pending", "dispatched", worker_id=f"w_{i}")
            for i in range(40)
        ]
        results = await asyncio.gather(*attempts)
        assert results.count(True) == 1
        job = await stores[1].get_job("j_1")
        assert job is not None and job.worker_id == f"w_{results.index(True)}"
    finally:
        await first.close()
        await second.close()


async def test_seq_is_unique_when_two_connections_submit_at_once(db_target: DbTarget) -> None:
    first = await open_database(db_target.url, db_target.data_dir)
    second = await open_database(db_target.url, db_target.data_dir)
    try:
        stores = [Store(first), Store(second)]
        jobs = await asyncio.gather(
            *(stores[i % 2].create_job(f"j_{i}", config={}) for i in range(40))
        )
        assert sorted(job.seq for job in jobs) == list(range(1, 41))
    finally:
        await first.close()
        await second.close()


async def test_attempts_start_ack_end(store: Store, clock: list[float]) -> None:
    await store.create_job("j_1", config={})
    first = await store.start_attempt("j_1", 1, worker_id="w_1")
    assert (first.number, first.dispatched_at, first.started_at) == (1, clock[0], None)
    with pytest.raises(AlreadyExists, match="attempt 1 already exists"):
        await store.start_attempt("j_1", 1, worker_id="w_2")
    assert await store.ack_attempt("j_1", 1, started_at=5.0)
    assert not await store.ack_attempt("j_1", 1)  # acknowledged once only
    assert await store.end_attempt("j_1", 1, outcome="lost", reason="heartbeat timeout")
    assert not await store.end_attempt("j_1", 1, outcome="failed")
    await store.start_attempt("j_1", 2, worker_id="w_2", dispatched_at=9.0)
    assert not await store.ack_attempt("j_1", 3)
    attempts = await store.list_attempts("j_1")
    assert [(a.number, a.worker_id, a.outcome) for a in attempts] == [
        (1, "w_1", "lost"),
        (2, "w_2", None),
    ]
    assert (attempts[0].started_at, attempts[0].reason) == (5.0, "heartbeat timeout")
    assert (attempts[0].kind, attempts[0].signature) == (None, None)  # none given
    # An end's kind and signature (issue 26) are stored with it.
    assert await store.end_attempt(
        "j_1", 2, outcome="failed", kind="infrastructure", signature="Xid 79 on GPU 1"
    )
    ended = (await store.list_attempts("j_1"))[1]
    assert (ended.outcome, ended.kind, ended.signature) == (
        "failed",
        "infrastructure",
        "Xid 79 on GPU 1",
    )
    with pytest.raises(pw.IntegrityError):
        await store.start_attempt("j_missing", 1, worker_id="w_1")


async def test_attempts_that_spent_no_retry_are_counted_in_one_query(store: Store) -> None:
    await count_attempts_apart_of_a_page(store)


async def test_timeline_in_order(store: Store, clock: list[float]) -> None:
    await store.create_job("j_1", config={})
    await store.create_job("j_2", config={})
    submitted = await store.append_job_event("j_1", "submitted", detail={"by": "alice"})
    await store.append_job_event("j_2", "submitted")
    await store.append_job_event("j_1", "dispatched", worker_id="w_1", attempt=1, at=7.5)
    events = await store.list_job_events("j_1")
    assert [(e.kind, e.worker_id, e.attempt, e.at) for e in events] == [
        ("submitted", None, None, clock[0]),
        ("dispatched", "w_1", 1, 7.5),
    ]
    assert events[0].detail == {"by": "alice"}
    later = await store.list_job_events("j_1", after_id=submitted.id)
    assert [e.kind for e in later] == ["dispatched"]


async def test_logs_append_dedupe_and_read_after_a_cursor(store: Store) -> None:
    await store.create_job("j_1", config={})
    assert await store.append_logs("j_1", 1, _lines(1, 3)) == 3
    assert await store.append_logs("j_1", 1, _lines(2, 3)) == 1  # 2 and 3 were already there
    assert await store.append_logs("j_1", 2, _lines(1, 2, "stderr")) == 2  # new attempt
    everything = await store.read_logs("j_1")
    assert [(row.attempt, row.seq, row.stream) for row in everything] == [
        (1, 1, "stdout"), (1, 2, "stdout"), (1, 3, "stdout"), (1, 4, "stdout"),
        (2, 1, "stderr"), (2, 2, "stderr"),
    ]  # fmt: skip
    assert everything[0].line == "line 1" and everything[0].at == 101.0
    after = await store.read_logs("j_1", after_id=everything[3].id)
    assert [(row.attempt, row.seq) for row in after] == [(2, 1), (2, 2)]
    assert [row.seq for row in await store.read_logs("j_1", attempt=1, limit=2)] == [1, 2]
    assert await store.read_logs("j_missing") == []


async def test_an_attempts_log_stops_at_its_quota_counts_what_it_drops_and_says_so_once(
    store: Store,
) -> None:
    # Finding 1 at small scale: a tiny quota and many posts.
    await store.create_job("j_1", config={})
    await store.start_attempt("j_1", 1, worker_id="w_1")
    quota = 10 * (64 + len("line 0")) + 5  # ten lines' worth ("line 0" … "line 9")
    results = [await store.append_logs_within_quota("j_1", 1, _lines(n, 4), quota)
               for n in range(0, 40, 4)]  # fmt: skip
    assert [r.stored for r in results] == [4, 4, 2, 0, 0, 0, 0, 0, 0, 0]
    assert sum(r.dropped for r in results) == 30
    assert [r.marker for r in results] == [False, False, True] + [False] * 7
    assert [r.quota_reached for r in results] == [False, False] + [True] * 8
    stored = await store.read_logs("j_1")
    assert [row.seq for row in stored] == [*range(10), -1]
    marker = stored[-1]
    assert (marker.stream, marker.at) == ("notice", 110.0)  # when the first dropped line was
    assert "reached its quota" in marker.line and "log_lines_dropped" in marker.line
    (attempt,) = await store.list_attempts("j_1")
    assert (attempt.log_bytes, attempt.log_lines_dropped) == (quota - 5, 30)
    # Past the quota a batch is not looked for among the stored lines: all of it is dropped.
    again = await store.append_logs_within_quota("j_1", 1, _lines(0, 4), quota)
    assert (again.stored, again.dropped) == (0, 4)
    # Another attempt has a quota of its own.
    await store.start_attempt("j_1", 2, worker_id="w_1")
    fresh = await store.append_logs_within_quota("j_1", 2, _lines(0, 3), quota)
    assert (fresh.stored, fresh.dropped, fresh.quota_reached) == (3, 0, False)
    # Within the quota a batch sent again is neither stored twice nor counted.
    again = await store.append_logs_within_quota("j_1", 2, _lines(0, 3), quota)
    assert (again.stored, again.dropped) == (0, 0)
    assert (await store.list_attempts("j_1"))[1].log_bytes == 3 * 70


async def test_empty_lines_count_against_the_quota(store: Store) -> None:
    await store.create_job("j_1", config={})
    await store.start_attempt("j_1", 1, worker_id="w_1")
    empty = [Line(seq, "stdout", "", 1.0) for seq in range(100)]
    result = await store.append_logs_within_quota("j_1", 1, empty, 64 * 10)
    assert (result.stored, result.dropped) == (10, 90)


async def test_a_large_log_batch_is_split_into_chunks(store: Store) -> None:
    await store.create_job("j_1", config={})
    assert await store.append_logs("j_1", 1, _lines(1, 1234)) == 1234
    first_page = await store.read_logs("j_1")
    assert len(first_page) == 1000
    rest = await store.read_logs("j_1", after_id=first_page[-1].id)
    assert [row.seq for row in rest] == list(range(1001, 1235))


async def test_atomically_commits_all_or_nothing(store: Store) -> None:
    await store.create_job("j_1", config={})

    def dispatch(repos: Repos) -> bool:
        if not repos.jobs.cas_state("j_1", "pending", "dispatched", worker_id="w_1", attempts=1):
            return False
        repos.jobs.start_attempt("j_1", 1, worker_id="w_1")
        repos.jobs.append_event("j_1", "dispatched", worker_id="w_1", attempt=1)
        return True

    def dispatch_then_fail(repos: Repos) -> None:
        repos.jobs.cas_state("j_1", "dispatched", "running")
        repos.jobs.append_event("j_1", "started")
        raise RuntimeError("worker vanished mid-commit")

    assert await store.atomically(dispatch)
    assert not await store.atomically(dispatch)
    with pytest.raises(RuntimeError, match="vanished"):
        await store.atomically(dispatch_then_fail)
    job = await store.get_job("j_1")
    assert job is not None and job.state == "dispatched"
    assert [e.kind for e in await store.list_job_events("j_1")] == ["dispatched"]
    assert len(await store.list_attempts("j_1")) == 1


async def test_on_sqlite_a_job_and_its_attempt_go_in_without_savepoints_of_their_own(
    tmp_path: Path,
) -> None:
    """SQLite undoes a failed statement alone and keeps its transaction, so the INSERTs
    that may hit a unique index need no savepoint there (PostgreSQL's do): one statement
    each per write, and a clash still leaves the write's other rows in."""
    db = await open_database(None, tmp_path)
    store = Store(db, now=lambda: 1.0)
    statements: list[str] = []

    def dispatched_job(repos: Repos) -> str:
        repos.jobs.insert("j_1", config={})
        repos.jobs.insert_attempt("j_1", 1, worker_id="w_1")
        try:
            repos.jobs.insert_attempt("j_1", 1, worker_id="w_2")
        except AlreadyExists as clash:
            return str(clash)
        return "no clash"

    try:
        await db.read(lambda: database_proxy.connection().set_trace_callback(statements.append))
        statements.clear()  # the read's own
        assert await store.atomically(dispatched_job) == "job j_1 attempt 1 already exists"
        written = [s.split(" (")[0] for s in statements if not s.startswith("SELECT")]
        assert written == [
            "BEGIN IMMEDIATE",
            'INSERT INTO "job"',
            'INSERT INTO "job_attempt"',
            'INSERT INTO "job_attempt"',
            "COMMIT",
        ]
        attempts = await store.list_attempts("j_1")
        assert [(a.number, a.worker_id) for a in attempts] == [(1, "w_1")]
        assert (await store.create_job("j_2", config={})).seq == 2
    finally:
        await db.close()
