"""Opening the database, and the one thread that owns its connection.

Every query runs on the DB thread, never on the event loop: `read(fn)` and `write(fn)`
queue a synchronous callable and await its result, which the thread hands back with
`loop.call_soon_threadsafe`. Writes queued together (heartbeats from many workers) run
in ONE transaction, each in its own savepoint (a write alone needs none), so one fsync
serves them all and a failing write undoes only itself. A write's caller hears back
only after the commit, so an acknowledged write is durable. Reads run between write
groups, after the writes queued before them. What must follow a write's commit before
its caller hears back (the audit file's line) runs on this thread too, as the write's
`after_commit`: no second hand-off to another thread and back.

Group commit across requests: when writes come from several requests at once (the last
group held more than one, or work was already waiting when the thread came back for
more), the thread lingers `linger_s` after the first write of a group so the writes
arriving meanwhile share its transaction and its fsync. A lone write on a quiet
database never waits: the thread only lingers once concurrency has been seen, and stops
as soon as a group comes alone again.

Checkpoints off the commit path (SQLite): a commit that takes the WAL past
`wal_autocheckpoint` pages copies it into the database file and fsyncs that file before
COMMIT returns, in its caller's time. The thread checkpoints instead once it has been idle
`checkpoint_idle_s` after `checkpoint_after_groups` committed groups, when nobody waits;
the pragma's limit (urls.WAL_AUTOCHECKPOINT_PAGES) stays as the bound on a WAL that a
never-idle thread would not copy back.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final, TypeVar

import peewee as pw
import structlog

from tunefleet.errors import TunefleetError
from tunefleet.storage.errors import (
    DatabaseClosed,
    DatabaseUnavailable,
    StorageFull,
    is_disk_full,
)
from tunefleet.storage.migrations import MigrationResult, migrate
from tunefleet.storage.models import database_proxy
from tunefleet.storage.statements import Savepoint
from tunefleet.storage.urls import (
    SQLITE_BUSY_TIMEOUT_MS,
    Backend,
    DatabaseConfig,
    build_peewee_database,
    parse_database_url,
)

T = TypeVar("T")

log = structlog.get_logger(__name__)

DEFAULT_MAX_GROUP: Final = 256
# About half a SQLite WAL commit with synchronous=FULL on a local SSD (0.7 ms here): long
# enough for the requests in flight to add their writes, short against the fsync saved.
DEFAULT_LINGER_S: Final = 0.0003
# Concurrency seen longer ago than this is forgotten: the next write is a lone one.
QUIET_AFTER_S: Final = 0.005
# A PASSIVE checkpoint once this many groups have committed since the last one and the
# queue has stayed empty this long (a lone write's next request comes sooner: the worker's
# acknowledgement after a dispatch). A tunefleet job commit adds 5 to 25 WAL pages. Not
# more often: the first commit after each checkpoint restarts the WAL, one more fsync.
DEFAULT_CHECKPOINT_AFTER_GROUPS: Final = 100
DEFAULT_CHECKPOINT_IDLE_S: Final = 0.002
_STOP: Final = object()


@dataclass(frozen=True, slots=True)
class DatabaseStats:
    """Counters since open: how well writes were grouped, for tests and metrics."""

    reads: int
    writes: int
    failed_writes: int
    write_groups: int  # committed (or failed) write transactions
    lingers: int = 0  # times the thread waited linger_s for more writes to join a group
    checkpoints: int = 0  # WAL checkpoints the thread ran while idle (SQLite)


class _Call:
    __slots__ = ("after_commit", "fn", "future", "is_write", "loop", "settled")

    def __init__(
        self,
        fn: Callable[[], Any],
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        is_write: bool,
        after_commit: Callable[[Any], None] | None = None,
    ) -> None:
        self.fn = fn
        self.loop = loop
        self.future = future
        self.is_write = is_write
        self.after_commit = after_commit
        self.settled = False

    def settle(self, ok: bool, value: Any) -> None:
        self.settled = True
        # A closed caller loop (RuntimeError) means nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(_settle_future, self.future, ok, value)


def _settle_all(calls: list[_Call], outcomes: list[tuple[bool, Any]]) -> None:
    """Answer a committed group: one wake-up of each caller loop for the whole group, not
    one per write (each wake-up is a write to the loop's self-pipe and a read back)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
    for call, (ok, value) in zip(calls, outcomes, strict=True):
        call.settled = True
        by_loop.setdefault(call.loop, []).append((call.future, ok, value))
    for loop, answers in by_loop.items():
        # A closed caller loop (RuntimeError) means nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle_futures, answers)


def follow_up(fn: Callable[[], None]) -> None:
    """Run what follows a committed write (its ``after_commit``, a commit listener): what
    it raises is logged, the write stays committed. The in-memory database uses it too."""
    try:
        fn()
    except Exception as exc:  # the write is committed: its caller still hears so
        log.exception("storage.after_commit_failed", error=str(exc))


def _settle_futures(answers: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in answers:
        _settle_future(future, ok, value)


def _settle_future(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():  # the caller was cancelled; the work itself still happened
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class Database:
    """One database connection owned by one thread. Build it with `open_database`."""

    def __init__(
        self,
        config: DatabaseConfig,
        *,
        max_group: int = DEFAULT_MAX_GROUP,
        linger_s: float = DEFAULT_LINGER_S,
        checkpoint_after_groups: int = DEFAULT_CHECKPOINT_AFTER_GROUPS,
        checkpoint_idle_s: float = DEFAULT_CHECKPOINT_IDLE_S,
    ) -> None:
        if max_group < 1:
            raise ValueError("max_group must be at least 1")
        if linger_s < 0:
            raise ValueError("linger_s must be 0 (never linger) or more")
        self.backend: Backend = config.backend
        self.description = config.description
        self._config = config
        self._max_group = max_group
        self._linger_s = linger_s
        self._checkpoint_after_groups = checkpoint_after_groups
        self._checkpoint_idle_s = checkpoint_idle_s
        self._checkpoints = self._groups_since_checkpoint = 0
        # Time, replaceable by tests (they count lingers; they never time them).
        self._sleep: Callable[[float], None] = time.sleep
        self._monotonic: Callable[[], float] = time.monotonic
        self._queue: queue.SimpleQueue[_Call | object] = queue.SimpleQueue()
        self._closing = False
        self._closed = asyncio.get_running_loop().create_future()
        self._pw: pw.Database | None = None
        self._reads = self._writes = self._failed_writes = self._groups = self._lingers = 0
        # Requests overlap: the last write group held several writes, or more work came
        # in while it committed. Only then does the thread linger for more writes.
        self._overlap = False
        self._rollback_listeners: list[Callable[[], None]] = []
        self._commit_listeners: list[Callable[[], None]] = []
        self._fence: Callable[[pw.Database], None] | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"tunefleet-db-{config.backend}", daemon=True
        )
        self._thread.start()

    def on_rollback(self, forget: Callable[[], None]) -> None:
        """Call `forget` on the DB thread whenever a write is rolled back, for what a
        repository remembers of its own writes (a rolled-back row must be forgotten)."""
        self._rollback_listeners.append(forget)

    def on_commit(self, done: Callable[[], None]) -> None:
        """Call `done` on the DB thread after each write group commits a write, once its
        writes' `after_commit` have run and before any of its callers is answered: for
        what those gather that costs less once per group (the audit file's lines, in one
        write)."""
        self._commit_listeners.append(done)

    def set_write_fence(self, fence: Callable[[pw.Database], None] | None) -> None:
        """Run `fence` on the DB thread first in every write group's transaction; if it
        raises, nothing of the group is written (leadership.fence: the term check)."""
        self._fence = fence

    @property
    def config(self) -> DatabaseConfig:
        return self._config

    @property
    def stats(self) -> DatabaseStats:
        return DatabaseStats(
            self._reads,
            self._writes,
            self._failed_writes,
            self._groups,
            self._lingers,
            self._checkpoints,
        )

    @property
    def queue_depth(self) -> int:
        """Reads and writes submitted and not yet picked up by the DB thread."""
        return self._queue.qsize()

    @property
    def thread_id(self) -> int | None:
        return self._thread.ident

    @property
    def closed(self) -> bool:
        return self._closing

    async def read(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the DB thread (in a read transaction, for a consistent view)."""
        return await self._submit(fn, is_write=False)

    async def write(
        self, fn: Callable[[], T], *, after_commit: Callable[[T], None] | None = None
    ) -> T:
        """Run `fn` on the DB thread in a savepoint of a (possibly shared) transaction.

        Returns after the commit. If `fn` raises, its savepoint is rolled back and the
        error is raised here; the other writes of the group are kept. A cancelled caller
        does not cancel the write. `after_commit(result)`, if given, runs on the DB
        thread once the commit is done and before the caller is answered; it is not
        called for a write that failed or was rolled back, and what it raises is logged,
        not raised (the write is committed).
        """
        return await self._submit(fn, is_write=True, after_commit=after_commit)

    async def close(self) -> None:
        """Run what is already queued, then close the connection. Idempotent."""
        if not self._closing:
            self._closing = True
            self._queue.put(_STOP)
        await asyncio.shield(self._closed)

    async def _submit(
        self,
        fn: Callable[[], T],
        *,
        is_write: bool,
        after_commit: Callable[[T], None] | None = None,
    ) -> T:
        if self._closing:
            raise DatabaseClosed(f"the database {self.description} is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Call(fn, loop, future, is_write, after_commit))
        return await future

    # --- on the DB thread ---------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        calls: list[_Call] = []
        try:
            while not stopping:
                idle_since = self._monotonic()
                batch = [self._next_when_idle()]
                if self._monotonic() - idle_since > QUIET_AFTER_S:
                    self._overlap = False  # a quiet spell: the next write is a lone one
                self._take_waiting(batch)
                if self._overlap and self._may_grow(batch):
                    self._lingers += 1
                    self._sleep(self._linger_s)  # releases the GIL: the loop queues more
                    self._take_waiting(batch)
                calls = [item for item in batch if isinstance(item, _Call)]
                stopping = len(calls) != len(batch)
                self._run_batch(calls)
        except BaseException as exc:
            # Only a BaseException from a callable (SystemExit...) or a bug gets here.
            # Nobody may be left waiting on a thread that is gone.
            self._closing = True
            log.exception("storage.thread_crashed", database=self.description)
            stopped = DatabaseClosed(f"the database thread stopped: {exc!r}")
            for call in calls:
                if not call.settled:
                    call.settle(False, stopped)
        finally:
            self._shut_down()

    def _next_when_idle(self) -> _Call | object:
        """The next queued item, waited for; a checkpoint first when one is due and the
        queue stays empty `checkpoint_idle_s`."""
        if self._groups_since_checkpoint >= self._checkpoint_after_groups > 0:
            try:
                return self._queue.get(timeout=self._checkpoint_idle_s)
            except queue.Empty:
                self._checkpoint()
        return self._queue.get()

    def _checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database file (PASSIVE: never waits on
        another connection), so the writes that come next do not."""
        self._groups_since_checkpoint = 0
        try:
            self._connection().execute_sql("PRAGMA wal_checkpoint(PASSIVE)")
        except pw.PeeweeException as exc:  # the commits are durable in the WAL regardless
            log.warning("storage.checkpoint_failed", database=self.description, error=str(exc))
        else:
            self._checkpoints += 1

    def _take_waiting(self, batch: list[_Call | object]) -> None:
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                return

    def _may_grow(self, batch: list[_Call | object]) -> bool:
        """Worth lingering for: a write group that is not full yet, and no close pending."""
        if self._linger_s <= 0:
            return False
        writes = 0
        for item in batch:
            if not isinstance(item, _Call):
                return False
            writes += item.is_write
        return 0 < writes < self._max_group

    def _run_batch(self, calls: list[_Call]) -> None:
        # Writes first, so a read never sees a state older than a write queued before
        # it; the reads of a batch then run between this batch's write groups and the
        # next batch's.
        writes = [call for call in calls if call.is_write]
        for start in range(0, len(writes), self._max_group):
            self._run_write_group(writes[start : start + self._max_group])
        for call in calls:
            if not call.is_write:
                self._run_read(call)

    def _connection(self) -> pw.Database:
        """The connected peewee database; reconnects after a lost PostgreSQL connection."""
        if self._pw is None:
            self._pw = build_peewee_database(self._config)
            database_proxy.initialize(self._pw)
        if not self._pw.is_closed() and not self._pw.is_connection_usable():
            log.warning("storage.reconnecting", database=self.description)
            try:
                self._pw.close()
            except pw.PeeweeException:
                self._pw.dispose()
        self._connect(self._pw)
        return self._pw

    def _connect(self, database: pw.Database) -> None:
        # Two processes opening a new SQLite file at once: switching it to WAL (a pragma
        # run on connecting) can fail at once with "database is locked", without waiting
        # out the busy timeout. Wait for the other to finish, as the busy timeout would.
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                database.connect(reuse_if_open=True)
                return
            except pw.OperationalError as exc:
                locked = self.backend == "sqlite" and "locked" in str(exc)
                if not locked or time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)

    def _run_read(self, call: _Call) -> None:
        self._reads += 1
        try:
            with self._connection().atomic():
                result = call.fn()
        except Exception as exc:
            call.settle(False, exc)
        else:
            call.settle(True, result)

    def _run_write_group(self, group: list[_Call]) -> None:
        self._groups += 1
        self._writes += len(group)
        outcomes: list[tuple[bool, Any]] = []
        try:
            database = self._connection()
            begin = ("IMMEDIATE",) if self.backend == "sqlite" else ()
            with database.atomic(*begin) as transaction:
                if self._fence is not None:
                    self._fence(database)
                if len(group) == 1:
                    outcomes.append(self._run_alone(group[0], transaction))
                else:
                    self._run_in_savepoints(database, group, outcomes)
            # Before anyone is answered: a caller's next request must not count as overlap.
            self._overlap = len(group) > 1 or not self._queue.empty()
            self._groups_since_checkpoint += self.backend == "sqlite"
        except Exception as exc:  # BEGIN or COMMIT failed: nothing of the group is kept
            self._overlap = False
            self._rolled_back()
            log.error("storage.write_group_failed", size=len(group), error=str(exc))
            self._failed_writes += len(group) - sum(not ok for ok, _ in outcomes)
            failure = self._failure(exc)
            for call in group:
                call.settle(False, failure)
            return
        kept = False
        for call, (ok, value) in zip(group, outcomes, strict=True):
            kept = kept or ok
            if ok and call.after_commit is not None:
                follow_up(partial(call.after_commit, value))
        if kept:
            for done in self._commit_listeners:
                follow_up(done)
        _settle_all(group, outcomes)

    def _run_in_savepoints(
        self, database: pw.Database, group: list[_Call], outcomes: list[tuple[bool, Any]]
    ) -> None:
        for call in group:
            # A savepoint each, so a failing write undoes only itself. Plain SQL: peewee's
            # savepoints cost a uuid4 and a context object apiece. One name for all, each
            # released before the next: three statement texts, not three per write, in
            # sqlite3's cache of 128 prepared statements (a group of 50 would evict the
            # hot INSERTs and UPDATEs, to be prepared again). On PostgreSQL each has a name
            # of its own and goes with the write's first statement (statements.Savepoint).
            savepoint = Savepoint(database, "write")
            try:
                with savepoint:
                    value = call.fn()
            except Exception as exc:
                if savepoint.lost:
                    raise  # its changes could not be undone alone: the group fails whole
                self._failed_writes += 1
                outcomes.append((False, self._failure(exc)))
                self._rolled_back()
            else:
                outcomes.append((True, value))

    def _run_alone(self, call: _Call, transaction: Any) -> tuple[bool, Any]:
        """A group of one needs no savepoint (two statements, two round trips on
        PostgreSQL): if it fails, the whole transaction is rolled back instead."""
        try:
            return True, call.fn()
        except Exception as exc:
            transaction.rollback()  # and begins again: the block commits nothing
            self._failed_writes += 1
            self._rolled_back()
            return False, self._failure(exc)

    def _failure(self, exc: Exception) -> Exception:
        """What a failed write's caller is told: a full disk as StorageFull (507), with
        what to do; any other error as it is."""
        if isinstance(exc, StorageFull) or not is_disk_full(exc):
            return exc
        full = StorageFull(
            f"the disk holding the database {self.description} is full, so nothing of this "
            "write was stored; free space on that disk (writes resume by themselves)"
        )
        full.__cause__ = exc
        return full

    def _rolled_back(self) -> None:
        for forget in self._rollback_listeners:
            forget()

    def _shut_down(self) -> None:
        leftover: list[_Call] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Call):
                leftover.append(item)
        for call in leftover:
            call.settle(False, DatabaseClosed(f"the database {self.description} is closed"))
        try:
            if self._pw is not None and not self._pw.is_closed():
                self._pw.close()
        except pw.PeeweeException as exc:
            log.warning("storage.close_failed", database=self.description, error=str(exc))
        finally:
            database_proxy.initialize(None)
            loop = self._closed.get_loop()
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle_future, self._closed, True, None)


async def open_database(
    url: str | None,
    data_dir: Path,
    *,
    max_group: int = DEFAULT_MAX_GROUP,
    linger_s: float = DEFAULT_LINGER_S,
    checkpoint_after_groups: int = DEFAULT_CHECKPOINT_AFTER_GROUPS,
    checkpoint_idle_s: float = DEFAULT_CHECKPOINT_IDLE_S,
) -> Database:
    """Open (and create or upgrade) the database that `url` names; None → SQLite in data_dir.

    Raises DatabaseUrlError for a URL it cannot use, DatabaseUnavailable when the database
    cannot be opened or reached, SchemaTooNew when a newer tunefleet wrote it. Every one
    of these is a TunefleetError with a one-line message saying what to fix.
    """
    config = parse_database_url(url, data_dir)
    db = Database(
        config,
        max_group=max_group,
        linger_s=linger_s,
        checkpoint_after_groups=checkpoint_after_groups,
        checkpoint_idle_s=checkpoint_idle_s,
    )
    try:
        result: MigrationResult = await db.write(lambda: migrate(db._connection()))
    except TunefleetError:
        await db.close()
        raise
    except (pw.PeeweeException, OSError) as exc:
        await db.close()
        raise DatabaseUnavailable(_unavailable_message(config, exc)) from exc
    log.info(
        "storage.opened",
        database=config.description,
        schema_from=result.from_version,
        schema_version=result.to_version,
    )
    return db


def _unavailable_message(config: DatabaseConfig, exc: BaseException) -> str:
    detail = next((line.strip() for line in str(exc).splitlines() if line.strip()), repr(exc))
    if config.backend == "postgresql":
        return (
            f"cannot use PostgreSQL at {config.description}: {detail}; check --database-url, "
            "that the server is running, and that this user may connect and create tables"
        )
    return (
        f"cannot open SQLite database {config.sqlite_path}: {detail}; "
        "check that the path is a tunefleet database in a writable directory"
    )
