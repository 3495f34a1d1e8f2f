"""SQLite serves one orchestrator process: a second one on the same database is refused
with a message saying what to do, and the first one's data is untouched."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.e2e.harness import ADMIN_TOKEN, TUNEFLEET, Orchestrator, free_port
from tunefleet.storage.process_lock import DataDirInUse, lock_sqlite_database


def test_the_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    db_path = str(tmp_path / "tunefleet.db")
    first = lock_sqlite_database(db_path)
    assert first is not None
    with pytest.raises(DataDirInUse) as refused:
        lock_sqlite_database(db_path)
    message = str(refused.value)
    assert db_path in message and "use PostgreSQL" in message
    assert "pid " in message and "stop it first" in message
    first.release()
    again = lock_sqlite_database(db_path)
    assert again is not None
    again.release()


def test_deleting_the_side_file_does_not_free_the_database(tmp_path: Path) -> None:
    """Issue 23: the lock was a flock on <db>.lock, and deleting that file let a second
    server lock a new one. The lock is on the database file itself now."""
    db_path = str(tmp_path / "tunefleet.db")
    first = lock_sqlite_database(db_path)
    assert first is not None
    try:
        Path(f"{db_path}.lock").unlink()
        with pytest.raises(DataDirInUse, match="already using the SQLite database"):
            lock_sqlite_database(db_path)
    finally:
        first.release()


def test_sqlite_closing_its_descriptors_keeps_the_lock(tmp_path: Path) -> None:
    """SQLite's own POSIX locks, and its closing of the file (which drops every POSIX lock
    the process holds on it), neither block nor undo the server's lock."""
    db_path = str(tmp_path / "tunefleet.db")
    first = lock_sqlite_database(db_path)
    assert first is not None
    try:
        for _ in range(2):
            conn = sqlite3.connect(db_path)
            with conn:
                conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
                conn.execute("INSERT INTO t VALUES (1)")
            conn.close()
            os.close(os.open(db_path, os.O_RDONLY))  # any descriptor of the file, closed
            with pytest.raises(DataDirInUse):
                lock_sqlite_database(db_path)
        conn = sqlite3.connect(db_path)
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)
        conn.close()
    finally:
        first.release()


def test_an_in_memory_database_needs_no_lock() -> None:
    assert lock_sqlite_database(":memory:") is None


@pytest.mark.e2e
@pytest.mark.parametrize("side_file", ["kept", "deleted"])
def test_a_second_server_on_the_same_data_dir_is_refused(tmp_path: Path, side_file: str) -> None:
    (tmp_path / "configs").mkdir()
    first = Orchestrator(tmp_path / "data", tmp_path / "configs").start()
    try:
        worker = first.create_worker("kept")
        if side_file == "deleted":  # issue 23: this used to let a second server in
            (tmp_path / "data" / "tunefleet.db.lock").unlink()
        second = subprocess.run(
            [
                *TUNEFLEET,
                "server",
                "--port",
                str(free_port()),
                "--data-dir",
                str(tmp_path / "data"),
                "--admin-token",
                ADMIN_TOKEN,
                "--no-local-runner",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert "already using the SQLite database" in second.stderr
        assert second.stderr.count("\n") == 1  # one line, no traceback
        assert first.worker(worker["worker_id"])["name"] == "kept"
        assert first.request("GET", "/readyz", token=None)["status"] == "ready"
    finally:
        first.stop()
