"""SQLite serves one orchestrator process: a second one on the same database is refused
with a message saying what to do, and the first one's data is untouched."""

from __future__ import annotations

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


def test_an_in_memory_database_needs_no_lock() -> None:
    assert lock_sqlite_database(":memory:") is None


@pytest.mark.e2e
def test_a_second_server_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    first = Orchestrator(tmp_path / "data", tmp_path / "configs").start()
    try:
        worker = first.create_worker("kept")
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
