"""A full disk under SQLite: a write group fails whole with StorageFull (507, saying what
to do), never "cannot rollback - no transaction is active", and the next one works once
there is room again (issue 23, finding 2)."""

from __future__ import annotations

import asyncio
import errno
import sqlite3
from pathlib import Path

import peewee as pw
import pytest
from structlog.testing import capture_logs

from tests.fakes.small_disk import fill, small_disk
from tunefleet.storage.database import open_database
from tunefleet.storage.errors import StorageFull, is_disk_full
from tunefleet.storage.models import database_proxy
from tunefleet.storage.store import Store
from tunefleet.storage.urls import build_peewee_database, parse_database_url

_PAD = "x" * 3000  # a few of these outgrow what a full tmpfs has left


def test_a_rollback_sqlite_already_made_is_not_made_again(tmp_path: Path) -> None:
    """SQLite ends a transaction itself after SQLITE_FULL; peewee's ROLLBACK after it
    failed and hid the real error. Here SQLite's own rollback is played by a ROLLBACK
    sent behind peewee's back."""
    database = build_peewee_database(parse_database_url(None, tmp_path))
    database.connect()
    try:
        with pytest.raises(RuntimeError, match="the real error"), database.atomic("IMMEDIATE"):
            database.execute_sql("CREATE TABLE t (x)")
            database.connection().execute("ROLLBACK")  # as SQLite does after SQLITE_FULL
            raise RuntimeError("the real error")
        with database.atomic("IMMEDIATE"):  # and the next transaction works
            database.execute_sql("CREATE TABLE u (x)")
        assert database.table_exists("u")
    finally:
        database.close()


def test_disk_full_errors_are_recognised_through_their_wrappers() -> None:
    driver = sqlite3.OperationalError("database or disk is full")
    driver.sqlite_errorcode = 13  # type: ignore[attr-defined]
    wrapped = pw.OperationalError(driver, *driver.args)
    assert is_disk_full(wrapped)
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    chained = RuntimeError("cannot undo a failed write")
    chained.__cause__ = wrapped
    assert is_disk_full(chained)
    assert not is_disk_full(pw.OperationalError("database is locked"))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))


async def test_a_full_disk_fails_writes_cleanly_and_they_resume_when_space_returns(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", 4) as disk:
        db = await open_database(None, disk)
        store = Store(db)
        try:
            before = await store.append_audit("job.submitted", detail={"n": 0})
            filler = fill(disk)
            with capture_logs() as logs:
                alone = []
                for n in range(40):  # enough to outgrow the pages SQLite has in hand
                    try:
                        await store.append_audit("job.submitted", detail={"pad": _PAD, "n": n})
                    except StorageFull as error:
                        alone.append(error)
                grouped = await asyncio.gather(
                    *(
                        store.append_audit("job.submitted", detail={"pad": _PAD, "g": n})
                        for n in range(40)
                    ),
                    return_exceptions=True,
                )
            assert alone, "the disk never filled: the test proves nothing"
            failures = [r for r in grouped if isinstance(r, BaseException)]
            assert failures and all(isinstance(f, StorageFull) for f in failures)
            detail = str(alone[0])
            assert "is full" in detail and "free space" in detail
            assert StorageFull.status == 507
            messages = " ".join(str(entry.get("error")) for entry in logs)
            assert "cannot rollback" not in messages
            filler.unlink()
            after = await store.append_audit("job.submitted", detail={"n": 1})
            assert after.id > before.id
            assert await store.verify_audit() == (True, None)
        finally:
            await db.close()
            database_proxy.initialize(None)
