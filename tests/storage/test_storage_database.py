"""The DB thread: work runs off the event loop, writes are grouped, close drains."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import peewee as pw
import pytest
from storage_testkit import DbTarget, kill_connection
from structlog.testing import capture_logs

from tunefleet.storage.database import Database, open_database
from tunefleet.storage.errors import DatabaseClosed
from tunefleet.storage.models import AuditEvent, Worker, database_proxy


def _insert_worker(worker_id: str) -> Callable[[], str]:
    def insert() -> str:
        Worker.insert(
            id=worker_id,
            name=worker_id,
            worker_type="persistent",
            state="idle",
            created_at=1.0,
            updated_at=1.0,
        ).execute()
        return worker_id

    return insert


def _worker_ids() -> list[str]:
    return sorted(w.id for w in Worker.select(Worker.id))


class Gate:
    """Holds the DB thread inside a read until released, so writes pile up behind it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def hold(self) -> None:
        self.entered.set()
        if not self.release.wait(timeout=10):
            raise TimeoutError("gate never released")


async def _hold_thread(db: Database) -> tuple[Gate, asyncio.Task[None]]:
    gate = Gate()
    held = asyncio.create_task(db.read(gate.hold))
    await asyncio.to_thread(gate.entered.wait, 10)
    return gate, held


async def _queued(db: Database, count: int) -> None:
    """Let the submitting tasks run until `count` calls wait in the DB queue."""
    for _ in range(1000):
        if db.queue_depth >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"only {db.queue_depth} of {count} calls got queued")


async def test_reads_and_writes_run_on_the_db_thread_not_the_loop(db: Database) -> None:
    loop_thread = threading.get_ident()
    read_thread = await db.read(threading.get_ident)
    write_thread = await db.write(threading.get_ident)
    assert read_thread == write_thread == db.thread_id
    assert read_thread != loop_thread


async def test_models_refuse_to_run_on_the_event_loop(db: Database) -> None:
    with pytest.raises(AttributeError, match="only usable on the database thread"):
        Worker.select().count()
    assert await db.read(lambda: Worker.select().count()) == 0


async def test_writes_queued_together_share_one_transaction(db: Database) -> None:
    gate, held = await _hold_thread(db)
    before = db.stats
    writes = [asyncio.create_task(db.write(_insert_worker(f"w_{i:02}"))) for i in range(50)]
    await _queued(db, 50)
    gate.release.set()
    await held
    assert await asyncio.gather(*writes) == [f"w_{i:02}" for i in range(50)]
    after = db.stats
    assert after.writes - before.writes == 50
    assert after.write_groups - before.write_groups == 1
    assert len(await db.read(_worker_ids)) == 50


async def test_a_group_wakes_each_caller_loop_once(db: Database) -> None:
    """Answers of one group reach each loop in one wake-up; a second loop (another
    thread's) gets its own answers, on its own loop."""
    loop = asyncio.get_running_loop()
    wakeups: list[object] = []
    real = loop.call_soon_threadsafe

    def counted(callback: Callable[..., object], *args: object) -> asyncio.Handle:
        if getattr(callback, "__module__", None) == Database.__module__:
            wakeups.append(callback)  # the DB thread answering (not asyncio's own)
        return real(callback, *args)

    other_results: list[str] = []
    other_ready = threading.Event()
    other_queued = threading.Event()

    def other_thread() -> None:
        async def write_from_here() -> None:
            task = asyncio.create_task(db.write(_insert_worker("w_other")))
            await asyncio.sleep(0)  # the call is in the DB queue now
            other_queued.set()
            other_results.append(await task)

        other_ready.set()
        asyncio.run(write_from_here())

    gate, held = await _hold_thread(db)
    loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
    try:
        writes = [asyncio.create_task(db.write(_insert_worker(f"w_{i}"))) for i in range(5)]
        await _queued(db, 5)
        thread = threading.Thread(target=other_thread)
        thread.start()
        await asyncio.to_thread(other_queued.wait, 10)
        before = db.stats.write_groups
        gate.release.set()
        await held
        assert await asyncio.gather(*writes) == [f"w_{i}" for i in range(5)]
        await asyncio.to_thread(thread.join, 10)
    finally:
        del loop.call_soon_threadsafe
    assert other_results == ["w_other"]
    assert db.stats.write_groups - before == 1
    # The held read's answer, then one wake-up for the five writes of this loop.
    assert len(wakeups) == 2


async def test_a_failing_write_undoes_only_itself(db: Database) -> None:
    def insert_then_fail() -> None:
        _insert_worker("w_doomed")()
        raise ValueError("changed my mind")

    gate, held = await _hold_thread(db)
    groups_before = db.stats.write_groups
    first = asyncio.create_task(db.write(_insert_worker("w_a")))
    failing = asyncio.create_task(db.write(insert_then_fail))
    duplicate = asyncio.create_task(db.write(_insert_worker("w_a")))  # IntegrityError
    last = asyncio.create_task(db.write(_insert_worker("w_b")))
    await _queued(db, 4)
    gate.release.set()
    await held
    assert await first == "w_a"
    with pytest.raises(ValueError, match="changed my mind"):
        await failing
    with pytest.raises(pw.IntegrityError):
        await duplicate
    assert await last == "w_b"
    assert db.stats.write_groups - groups_before == 1
    assert db.stats.failed_writes == 2
    assert await db.read(_worker_ids) == ["w_a", "w_b"]


async def test_group_size_is_bounded(db_target: DbTarget) -> None:
    db = await open_database(db_target.url, db_target.data_dir, max_group=4)
    try:
        gate, held = await _hold_thread(db)
        before = db.stats.write_groups
        writes = [asyncio.create_task(db.write(_insert_worker(f"w_{i}"))) for i in range(10)]
        await _queued(db, 10)
        gate.release.set()
        await held
        await asyncio.gather(*writes)
        assert db.stats.write_groups - before == 3  # 4 + 4 + 2
    finally:
        await db.close()


async def test_max_group_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_group"):
        await open_database(None, tmp_path, max_group=0)


async def test_a_cancelled_caller_does_not_cancel_its_write(db: Database) -> None:
    gate, held = await _hold_thread(db)
    write = asyncio.create_task(db.write(_insert_worker("w_kept")))
    await _queued(db, 1)
    write.cancel()
    gate.release.set()
    await held
    assert await db.read(_worker_ids) == ["w_kept"]


async def test_close_drains_queued_work_then_refuses_more(db_target: DbTarget) -> None:
    db = await open_database(db_target.url, db_target.data_dir)
    gate, held = await _hold_thread(db)
    writes = [asyncio.create_task(db.write(_insert_worker(f"w_{i}"))) for i in range(5)]
    await _queued(db, 5)
    closing = asyncio.create_task(db.close())
    await asyncio.sleep(0)
    assert db.closed
    gate.release.set()
    await closing
    await held
    assert len(await asyncio.gather(*writes)) == 5
    with pytest.raises(DatabaseClosed, match="is closed"):
        await db.read(_worker_ids)
    with pytest.raises(DatabaseClosed):
        await db.write(_insert_worker("w_late"))
    await db.close()  # idempotent

    reopened = await open_database(db_target.url, db_target.data_dir)
    try:
        assert len(await reopened.read(_worker_ids)) == 5
    finally:
        await reopened.close()


async def test_reads_run_inside_a_transaction(db: Database) -> None:
    assert await db.read(lambda: database_proxy.in_transaction())


async def test_a_read_error_reaches_its_caller_only(db: Database) -> None:
    def broken() -> None:
        raise KeyError("nope")

    with pytest.raises(KeyError):
        await db.read(broken)
    assert await db.read(lambda: 42) == 42


async def test_two_databases_can_be_open_at_once(tmp_path: Path) -> None:
    first = await open_database(None, tmp_path / "one")
    second = await open_database(None, tmp_path / "two")
    try:
        await first.write(_insert_worker("w_first"))
        await second.write(_insert_worker("w_second"))
        assert await first.read(_worker_ids) == ["w_first"]
        assert await second.read(_worker_ids) == ["w_second"]
    finally:
        await first.close()
        await second.close()


async def test_sqlite_pragmas(tmp_path: Path) -> None:
    db = await open_database(None, tmp_path)

    def pragmas() -> dict[str, object]:
        names = ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")
        names += ("wal_autocheckpoint", "temp_store")
        return {name: database_proxy.pragma(name) for name in names}

    try:
        assert db.backend == "sqlite"
        assert (tmp_path / "tunefleet.db").exists()
        assert await db.read(pragmas) == {
            "journal_mode": "wal",
            "foreign_keys": 1,
            "busy_timeout": 5000,
            "synchronous": 2,  # FULL
            "wal_autocheckpoint": 4000,  # the bound: the thread checkpoints when idle
            "temp_store": 2,  # MEMORY: a write's undo pages never spill to a file
        }
    finally:
        await db.close()


async def test_sqlite_in_memory(tmp_path: Path) -> None:
    db = await open_database("sqlite:///:memory:", tmp_path)
    try:
        assert await db.write(lambda: AuditEvent.select().count()) == 0
        assert db.description == "sqlite:///:memory:"
    finally:
        await db.close()
    assert not await asyncio.to_thread(lambda: list(tmp_path.iterdir()))


class _Escape(BaseException):
    """Stands for SystemExit and friends, which `except Exception` does not catch."""


async def test_a_dead_db_thread_leaves_nobody_waiting(db_target: DbTarget) -> None:
    db = await open_database(db_target.url, db_target.data_dir)

    def escape() -> None:
        raise _Escape

    gate, held = await _hold_thread(db)
    doomed = asyncio.create_task(db.write(escape))
    bystander = asyncio.create_task(db.write(_insert_worker("w_bystander")))
    await _queued(db, 2)
    gate.release.set()
    await held
    for task in (doomed, bystander):
        with pytest.raises(DatabaseClosed, match="the database thread stopped: _Escape"):
            await task
    with pytest.raises(DatabaseClosed):
        await db.read(_worker_ids)
    await db.close()

    reopened = await open_database(db_target.url, db_target.data_dir)
    try:  # the bystander shared the crashed transaction, so it was not committed
        assert await reopened.read(_worker_ids) == []
    finally:
        await reopened.close()


@pytest.mark.parametrize(
    "db_target", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
async def test_a_lost_postgres_connection_is_reopened(db: Database) -> None:
    await kill_connection(db)
    # The call that meets the dead connection fails (a write's fate would be unknown,
    # so nothing is retried blindly); the next one gets a new connection.
    with pytest.raises(pw.DatabaseError):
        await db.write(_insert_worker("w_lost"))
    assert await db.write(_insert_worker("w_after")) == "w_after"
    assert await db.read(_worker_ids) == ["w_after"]


# --- group commit across requests: lingering for writes that arrive a moment later ----


async def test_a_lone_writer_never_lingers(db: Database) -> None:
    """One request at a time: every write commits at once (counted, never timed)."""
    before = db.stats
    for i in range(5):
        await db.write(_insert_worker(f"w_{i}"))
        await db.read(_worker_ids)
    after = db.stats
    assert after.lingers == before.lingers
    assert after.write_groups - before.write_groups == 5


class LateArrival:
    """Stands in for the linger's sleep: while the DB thread lingers, another request
    queues a write (exactly when the linger runs, so the test counts instead of timing)."""

    def __init__(self, db: Database, fn: Callable[[], object]) -> None:
        self.db = db
        self.fn = fn
        self.loop = asyncio.get_running_loop()
        self.writes: list[asyncio.Future[object]] = []
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        if len(self.waits) > 1:
            return
        queued = threading.Event()

        def start() -> None:
            self.writes.append(asyncio.ensure_future(self.db.write(self.fn)))
            self.loop.call_soon(queued.set)  # the task has put its call in the queue

        self.loop.call_soon_threadsafe(start)
        if not queued.wait(timeout=10):
            raise TimeoutError("the late write was never queued")

    async def result(self) -> object:
        return await self.writes[0]


async def _make_concurrent(db: Database) -> None:
    """Two writes queued together: the DB thread has now seen requests overlap."""
    gate, held = await _hold_thread(db)
    writes = [asyncio.create_task(db.write(_insert_worker(f"w_busy{i}"))) for i in range(2)]
    await _queued(db, 2)
    gate.release.set()
    await held
    await asyncio.gather(*writes)


async def test_after_overlapping_writes_a_write_arriving_during_the_linger_shares_its_commit(
    db: Database,
) -> None:
    late = LateArrival(db, _insert_worker("w_late"))
    db._sleep = late
    await _make_concurrent(db)
    before = db.stats
    assert await db.write(_insert_worker("w_first")) == "w_first"
    assert await late.result() == "w_late"
    after = db.stats
    assert late.waits[0] == pytest.approx(0.0003)
    assert after.lingers - before.lingers == 1
    assert after.writes - before.writes == 2
    assert after.write_groups - before.write_groups == 1  # one transaction, one fsync
    assert "w_late" in await db.read(_worker_ids)


async def test_a_failing_write_that_joined_during_the_linger_undoes_only_itself(
    db: Database,
) -> None:
    def insert_then_fail() -> None:
        _insert_worker("w_doomed")()
        raise ValueError("changed my mind")

    late = LateArrival(db, insert_then_fail)
    db._sleep = late
    await _make_concurrent(db)
    before = db.stats
    assert await db.write(_insert_worker("w_kept")) == "w_kept"
    with pytest.raises(ValueError, match="changed my mind"):
        await late.result()
    after = db.stats
    assert after.write_groups - before.write_groups == 1
    assert after.failed_writes - before.failed_writes == 1
    ids = await db.read(_worker_ids)
    assert "w_kept" in ids
    assert "w_doomed" not in ids


async def test_concurrency_seen_before_a_quiet_spell_is_forgotten(db: Database) -> None:
    await _make_concurrent(db)
    looks = [0]

    def quiet_clock() -> float:  # every look at the clock finds another minute gone
        looks[0] += 1
        return time.monotonic() + 60.0 * looks[0]

    db._monotonic = quiet_clock
    before = db.stats.lingers
    await db.write(_insert_worker("w_after_a_while"))
    assert db.stats.lingers == before


async def test_overlapping_writers_share_commits(db: Database) -> None:
    """Ten requests writing at once, five writes each: far fewer commits than writes."""

    async def writer(n: int) -> None:
        for i in range(5):
            await db.write(_insert_worker(f"w_{n}_{i}"))

    before = db.stats
    await asyncio.gather(*(writer(n) for n in range(10)))
    after = db.stats
    assert after.writes - before.writes == 50
    assert after.write_groups - before.write_groups < 25


async def test_no_linger_when_turned_off(db_target: DbTarget) -> None:
    db = await open_database(db_target.url, db_target.data_dir, linger_s=0)
    try:
        await _make_concurrent(db)
        await db.write(_insert_worker("w_next"))
        assert db.stats.lingers == 0
    finally:
        await db.close()


async def test_linger_must_not_be_negative(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="linger_s"):
        await open_database(None, tmp_path, linger_s=-0.001)


# --- checkpoints: by the idle thread, not by a commit ---------------------------------


async def _checkpoints_after_idle(db: Database, expected: int) -> int:
    """The thread's checkpoint count once it has gone idle again (a read is answered
    first if it comes before the thread checks: poll, counting loop turns, not time)."""
    await db.read(lambda: None)
    for _ in range(500):
        if db.stats.checkpoints >= expected:
            break
        await asyncio.sleep(0.01)
    return db.stats.checkpoints


def _rows_in_the_database_file_alone(tmp_path: Path) -> list[str]:
    """The worker ids the main database file holds without its WAL: what checkpoints
    copied there."""
    copy = tmp_path / "copy"
    copy.mkdir(exist_ok=True)
    (copy / "tunefleet.db").write_bytes((tmp_path / "tunefleet.db").read_bytes())
    connection = sqlite3.connect(copy / "tunefleet.db")
    try:
        tables = connection.execute("SELECT name FROM sqlite_master WHERE name = 'worker'")
        if not tables.fetchall():
            return []  # not even the schema was copied yet
        return sorted(row[0] for row in connection.execute("SELECT id FROM worker"))
    finally:
        connection.close()


async def test_the_idle_thread_checkpoints_once_enough_groups_committed(tmp_path: Path) -> None:
    # Four groups: the migration's and three writes.
    db = await open_database(None, tmp_path, checkpoint_after_groups=4, checkpoint_idle_s=0)
    try:
        for worker_id in ("w_a", "w_b"):
            await db.write(_insert_worker(worker_id))
        await db.read(lambda: None)
        await db.read(lambda: None)
        assert db.stats.checkpoints == 0  # three groups: not yet
        assert _rows_in_the_database_file_alone(tmp_path) == []
        await db.write(_insert_worker("w_c"))
        assert await _checkpoints_after_idle(db, 1) == 1
        assert _rows_in_the_database_file_alone(tmp_path) == ["w_a", "w_b", "w_c"]
    finally:
        await db.close()


async def test_a_commit_below_the_bound_leaves_the_wal_to_the_thread(tmp_path: Path) -> None:
    """With the idle checkpoint off, commits alone copy nothing into the database file
    below wal_autocheckpoint: SQLite's default (1,000 pages) would have, at about three
    pages a commit."""
    db = await open_database(None, tmp_path, checkpoint_after_groups=0)
    try:
        for n in range(400):
            await db.write(_insert_worker(f"w_{n:03}"))
        await db.read(lambda: None)
        assert db.stats.checkpoints == 0
        assert _rows_in_the_database_file_alone(tmp_path) == []
    finally:
        await db.close()


# --- a write alone: no savepoint, and a failure rolls the transaction back ------------


async def test_a_lone_failing_write_undoes_itself_and_the_next_one_commits(db: Database) -> None:
    def insert_then_fail() -> None:
        _insert_worker("w_doomed")()
        raise ValueError("changed my mind")

    before = db.stats
    with pytest.raises(ValueError, match="changed my mind"):
        await db.write(insert_then_fail)
    assert await db.write(_insert_worker("w_after")) == "w_after"
    after = db.stats
    assert after.failed_writes - before.failed_writes == 1
    assert after.write_groups - before.write_groups == 2
    assert await db.read(_worker_ids) == ["w_after"]


async def test_a_lone_write_runs_without_a_savepoint_a_group_with_one_each(
    tmp_path: Path,
) -> None:
    db = await open_database(None, tmp_path)
    statements: list[str] = []
    try:
        await db.read(lambda: database_proxy.connection().set_trace_callback(statements.append))
        await db.write(_insert_worker("w_alone"))
        assert not [s for s in statements if "SAVEPOINT" in s]
        await _make_concurrent(db)
        # One name for every write of a group (each released before the next), so a big
        # group adds no statement texts to sqlite3's prepared-statement cache.
        assert [s for s in statements if s.startswith("SAVEPOINT")] == [
            "SAVEPOINT write",
            "SAVEPOINT write",
        ]
    finally:
        await db.close()


# --- after_commit: what must follow a write's commit, on the DB thread ------------------


async def test_after_commit_runs_on_the_db_thread_once_committed_before_the_answer(
    db: Database,
) -> None:
    seen: list[tuple[str, int, bool]] = []

    def after(worker_id: str) -> None:
        seen.append((worker_id, threading.get_ident(), database_proxy.in_transaction()))

    assert await db.write(_insert_worker("w_1"), after_commit=after) == "w_1"
    # Heard of by the time the caller is answered: no hand-off of its own.
    assert seen == [("w_1", db.thread_id, False)]


async def test_after_commit_follows_only_the_writes_a_group_kept(db: Database) -> None:
    def fail() -> str:
        _insert_worker("w_doomed")()
        raise ValueError("changed my mind")

    followed: list[str] = []
    gate, held = await _hold_thread(db)
    writes = [
        asyncio.create_task(db.write(fn, after_commit=followed.append))
        for fn in (_insert_worker("w_a"), fail, _insert_worker("w_b"))
    ]
    await _queued(db, 3)
    gate.release.set()
    await held
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert results[0] == "w_a" and isinstance(results[1], ValueError) and results[2] == "w_b"
    assert followed == ["w_a", "w_b"]  # in the group's order; not the one rolled back


async def test_after_commit_is_not_run_when_the_group_is_not_committed(db: Database) -> None:
    def refuse(database: pw.Database) -> None:
        raise RuntimeError("not the leader")

    def insert_then_fail() -> str:
        _insert_worker("w_2")()
        raise ValueError("changed my mind")

    followed: list[str] = []
    db.set_write_fence(refuse)  # the whole group refused
    with pytest.raises(RuntimeError, match="not the leader"):
        await db.write(_insert_worker("w_1"), after_commit=followed.append)
    db.set_write_fence(None)
    with pytest.raises(ValueError, match="changed my mind"):  # a lone write rolled back
        await db.write(insert_then_fail, after_commit=followed.append)
    assert followed == []
    assert await db.read(_worker_ids) == []


async def test_an_after_commit_that_raises_is_logged_and_the_write_still_answered(
    db: Database,
) -> None:
    def broken(worker_id: str) -> None:
        raise OSError("disk full")

    with capture_logs() as logs:
        assert await db.write(_insert_worker("w_1"), after_commit=broken) == "w_1"
    assert [(e["event"], e["log_level"]) for e in logs] == [
        ("storage.after_commit_failed", "error")
    ]
    assert await db.read(_worker_ids) == ["w_1"]


async def test_on_commit_runs_once_per_committed_group_after_its_writes_follow_ups(
    db: Database,
) -> None:
    events: list[str] = []
    db.on_commit(lambda: events.append("group committed"))
    gate, held = await _hold_thread(db)
    writes = [
        asyncio.create_task(db.write(_insert_worker(f"w_{i}"), after_commit=events.append))
        for i in range(3)
    ]
    await _queued(db, 3)
    before = db.stats.write_groups
    gate.release.set()
    await held
    await asyncio.gather(*writes)
    assert db.stats.write_groups - before == 1
    assert events == ["w_0", "w_1", "w_2", "group committed"]

    def refuse(database: pw.Database) -> None:
        raise RuntimeError("not the leader")

    db.set_write_fence(refuse)
    with pytest.raises(RuntimeError, match="not the leader"):
        await db.write(_insert_worker("w_9"), after_commit=events.append)
    assert events[-1] == "group committed" and len(events) == 4  # a refused group: nothing
