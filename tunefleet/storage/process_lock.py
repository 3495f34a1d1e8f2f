"""One orchestrator process per SQLite database: an exclusive flock on `<db>.lock`.

SQLite itself would let a second server open the same file, and the two would each hold
their own idea of the fleet in memory and overwrite each other's work. The lock is held
for the life of the process and released by the kernel however it ends (even kill -9),
so a stale lock never needs cleaning up. Several orchestrators need PostgreSQL.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from tunefleet.storage.errors import StorageError


class DataDirInUse(StorageError):
    """Another process already serves this SQLite database."""


class ProcessLock:
    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def lock_sqlite_database(db_path: str) -> ProcessLock | None:
    """Take the lock for `db_path` (None for an in-memory database, which is private).

    Raises DataDirInUse, naming the other process, when it is held.
    """
    if db_path == ":memory:":
        return None
    path = Path(f"{db_path}.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise DataDirInUse(
            f"another tunefleet server (pid {other}) is already using the SQLite database "
            f"{db_path} (it holds {path}): stop it first, or give this one its own "
            "--data-dir; to run several orchestrators on one database use PostgreSQL "
            "(docs/operations.md, high availability)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return ProcessLock(path, fd)
