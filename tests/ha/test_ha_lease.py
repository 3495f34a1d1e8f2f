"""The lease row and the fence on PostgreSQL: one holder at a time, terms that only go
up, a takeover that waits for write groups in flight, and an old term that cannot write."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import peewee as pw
import pytest

from tunefleet.storage.database import open_database
from tunefleet.storage.leadership import (
    LeadershipLost,
    LeaseKeeper,
    LeaseView,
    fence,
    read_lease,
    try_acquire,
)
from tunefleet.storage.urls import build_peewee_database, parse_database_url

pytestmark = pytest.mark.postgres


def _raw(url: str, tmp_path: Path) -> pw.Database:
    database = build_peewee_database(parse_database_url(url, tmp_path))
    database.connect()
    database.autocommit = True  # type: ignore[attr-defined]
    return database


class Events:
    def __init__(self) -> None:
        self.acquired: list[int] = []
        self.lost: list[str] = []
        self.seen: list[LeaseView | None] = []
        self.changed = threading.Event()

    def keeper(self, url: str, tmp_path: Path, name: str, lease_s: float) -> LeaseKeeper:
        def acquired(term: int) -> None:
            self.acquired.append(term)
            self.changed.set()

        def lost(reason: str) -> None:
            self.lost.append(reason)
            self.changed.set()

        return LeaseKeeper(
            parse_database_url(url, tmp_path),
            holder=name,
            advertise_url=f"http://{name}:8001",
            lease_s=lease_s,
            on_acquired=acquired,
            on_lost=lost,
            on_observed=self.seen.append,
        )


def _wait(check: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s")


async def _migrated(url: str, tmp_path: Path) -> None:
    db = await open_database(url, tmp_path)
    await db.close()


async def test_one_holder_standby_sees_it_and_takes_over_on_release(
    pg_url: str, tmp_path: Path
) -> None:
    await _migrated(pg_url, tmp_path)
    first, second = Events(), Events()
    a = first.keeper(pg_url, tmp_path, "a", lease_s=1.0)
    b = second.keeper(pg_url, tmp_path, "b", lease_s=1.0)
    a.start()
    await asyncio.to_thread(_wait, lambda: first.acquired, 5)
    b.start()
    await asyncio.to_thread(_wait, lambda: second.seen, 5)
    await asyncio.sleep(1.5)  # several renewals: the standby still stands by
    assert first.acquired == [1] and second.acquired == [] and first.lost == []
    seen = second.seen[-1]
    assert seen is not None and (seen.term, seen.holder) == (1, "a")
    assert seen.advertise_url == "http://a:8001" and seen.expires_in_s > 0
    await asyncio.to_thread(a.stop)  # graceful: the lease is released at once
    started = time.monotonic()
    await asyncio.to_thread(_wait, lambda: second.acquired, 5)
    assert second.acquired == [2]
    assert time.monotonic() - started < 1.0  # no waiting out the lease
    await asyncio.to_thread(b.stop)


async def test_an_expired_lease_is_taken_with_a_new_term_and_the_old_term_cannot_write(
    pg_url: str, tmp_path: Path
) -> None:
    await _migrated(pg_url, tmp_path)
    first, second = Events(), Events()
    a = first.keeper(pg_url, tmp_path, "a", lease_s=1.0)
    a.start()
    await asyncio.to_thread(_wait, lambda: first.acquired, 5)
    db = await open_database(pg_url, tmp_path)
    try:
        db.set_write_fence(lambda d: fence(d, 1, 1.0))
        await db.write(lambda: d_exec(db, "CREATE TABLE probe (n int)"))
        # "Pause" the holder: it stops renewing without releasing; the standby waits the
        # lease out and takes a new term.
        await asyncio.to_thread(a.stop, release_lease=False)
        b = second.keeper(pg_url, tmp_path, "b", lease_s=1.0)
        b.start()
        await asyncio.to_thread(_wait, lambda: second.acquired, 5)
        assert second.acquired == [2]
        with pytest.raises(LeadershipLost, match="term 1 is over"):
            await db.write(lambda: d_exec(db, "INSERT INTO probe VALUES (1)"))
        assert await db.read(lambda: d_exec(db, "SELECT count(*) FROM probe")) == 0
        await asyncio.to_thread(b.stop)
    finally:
        await db.close()


def d_exec(db: object, sql: str) -> int | None:
    from tunefleet.storage.models import database_proxy

    cursor = database_proxy.execute_sql(sql)
    if cursor.description is None:
        return None
    return int(cursor.fetchone()[0])


async def test_a_takeover_waits_for_the_write_group_in_flight(pg_url: str, tmp_path: Path) -> None:
    await _migrated(pg_url, tmp_path)
    raw = _raw(pg_url, tmp_path)
    assert try_acquire(raw, "a", None, 0.3) == 1
    db = await open_database(pg_url, tmp_path)
    try:
        db.set_write_fence(lambda d: fence(d, 1, 5.0))
        await db.write(lambda: d_exec(db, "CREATE TABLE probe (n int)"))
        in_fence = threading.Event()

        def slow_write() -> None:
            in_fence.set()
            time.sleep(1.0)  # the lease expires while this write holds the fence
            d_exec(db, "INSERT INTO probe VALUES (1)")

        writing = asyncio.ensure_future(db.write(slow_write))
        await asyncio.to_thread(in_fence.wait, 5)
        await asyncio.sleep(0.4)  # past the 0.3 s lease
        started = time.monotonic()
        other = _raw(pg_url, tmp_path)
        term = await asyncio.to_thread(try_acquire, other, "b", None, 5.0)
        waited = time.monotonic() - started
        await writing  # the write of term 1 committed before term 2 began
        assert term == 2
        assert waited > 0.3
        assert await db.read(lambda: d_exec(db, "SELECT count(*) FROM probe")) == 1
        with pytest.raises(LeadershipLost):
            await db.write(lambda: d_exec(db, "INSERT INTO probe VALUES (2)"))
        other.close()
    finally:
        await db.close()
        raw.close()


async def test_a_holder_paused_inside_a_write_cannot_block_a_takeover(
    pg_url: str, tmp_path: Path
) -> None:
    await _migrated(pg_url, tmp_path)
    raw = _raw(pg_url, tmp_path)
    assert try_acquire(raw, "a", None, 0.5) == 1
    holder = build_peewee_database(parse_database_url(pg_url, tmp_path))
    holder.connect()
    holder.execute_sql("BEGIN")
    fence(holder, 1, 1.0)  # share lock held, then the process "stops" (idle in transaction)
    started = time.monotonic()
    term = await asyncio.to_thread(_acquire_eventually, raw, 10.0)
    assert term == 2
    assert time.monotonic() - started < 5.0  # the 1 s idle timeout ended the paused txn
    with pytest.raises(pw.PeeweeException):
        holder.execute_sql("SELECT 1")
    raw.close()


def _acquire_eventually(database: pw.Database, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        term = try_acquire(database, "b", None, 5.0)
        if term is not None:
            return term
        time.sleep(0.05)
    raise AssertionError("never acquired")


async def test_the_holder_notices_a_newer_term_and_steps_down(pg_url: str, tmp_path: Path) -> None:
    await _migrated(pg_url, tmp_path)
    events = Events()
    keeper = events.keeper(pg_url, tmp_path, "a", lease_s=0.6)
    keeper.start()
    await asyncio.to_thread(_wait, lambda: events.acquired, 5)
    raw = _raw(pg_url, tmp_path)
    raw.execute_sql("UPDATE leader_lease SET term = term + 1, holder = 'b'")
    await asyncio.to_thread(_wait, lambda: events.lost, 3)
    assert events.lost == ["another orchestrator took over the lease"]
    await asyncio.to_thread(keeper.stop)
    lease = read_lease(raw)
    assert lease is not None and lease.holder == "b"  # stopping did not touch b's lease
    raw.close()


async def test_the_holder_steps_down_when_it_cannot_renew_for_a_lease(
    pg_url: str, tmp_path: Path
) -> None:
    await _migrated(pg_url, tmp_path)
    events = Events()
    keeper = events.keeper(pg_url, tmp_path, "a", lease_s=0.8)
    keeper.start()
    await asyncio.to_thread(_wait, lambda: events.acquired, 5)
    # The database becomes unreachable for this process.
    broken = parse_database_url(pg_url.replace(":5432/", ":1/"), tmp_path)
    keeper.config = broken
    if keeper._db is not None:
        keeper._db.close()
    keeper._db = None
    started = time.monotonic()
    await asyncio.to_thread(_wait, lambda: events.lost, 5)
    assert events.lost == ["the lease was not renewed for 0.8 s"]
    assert time.monotonic() - started < 1.6
    await asyncio.to_thread(keeper.stop, release_lease=False)
