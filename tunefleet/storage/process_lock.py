"""One orchestrator process per SQLite database: a lock on the database file itself.

SQLite itself would let a second server open the same file, and the two would each hold
their own idea of the fleet in memory and overwrite each other's work. The lock is held
for the life of the process and released by the kernel however it ends (even kill -9),
so a stale lock never needs cleaning up. Several orchestrators need PostgreSQL.

Why on the database file, and why an open-file-description lock (Linux F_OFD_SETLK): a
lock on a side file is gone once someone deletes that file, and the next server locks a
new one. SQLite takes POSIX fcntl locks on the database file, and a process drops all of
its POSIX locks on a file when it closes ANY descriptor of it; an OFD lock belongs to our
own descriptor only, so neither SQLite's closing nor ours disturbs the other. It covers
one byte far past SQLite's lock bytes (at 1 GiB), so it never conflicts with them.
``<db>.lock`` now only names the holder's pid, for the refusal's message. Where OFD locks
do not exist (not Linux), the side file is flocked as before.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from collections.abc import Callable
from pathlib import Path

from tunefleet.storage.errors import StorageError

# A byte no SQLite lock touches (its own are at 0x40000000 and the 510 after it).
LOCK_OFFSET = 1 << 62
_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)


class DataDirInUse(StorageError):
    """Another process already serves this SQLite database."""


class ProcessLock:
    def __init__(self, path: Path, fds: tuple[int, ...]) -> None:
        self.path = path
        self._fds = fds

    def release(self) -> None:
        # Closing our descriptors drops our locks (and, for the database file, would drop
        # SQLite's POSIX locks too: release only after the database is closed).
        for fd in self._fds:
            os.close(fd)
        self._fds = ()


def lock_sqlite_database(db_path: str) -> ProcessLock | None:
    """Take the lock for `db_path` (None for an in-memory database, which is private).

    Raises DataDirInUse, naming the other process, when it is held.
    """
    if db_path == ":memory:":
        return None
    database = Path(db_path)
    database.parent.mkdir(parents=True, exist_ok=True)
    note = Path(f"{db_path}.lock")
    if _OFD_SETLK is None:
        fd = _open(note)
        _take(fd, note, db_path, lambda: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB))
        _write_pid(fd)
        return ProcessLock(note, (fd,))
    # An empty file is a valid empty SQLite database: creating it here is harmless.
    fd = _open(database)
    _take(fd, note, db_path, lambda: _ofd_lock(fd, _OFD_SETLK))
    try:
        note_fd = _open(note)
    except OSError:
        return ProcessLock(database, (fd,))  # the pid note is a courtesy, not the lock
    _write_pid(note_fd)
    os.close(note_fd)
    return ProcessLock(database, (fd,))


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _ofd_lock(fd: int, command: int) -> None:
    """An exclusive OFD lock on LOCK_OFFSET; BlockingIOError when another holds it."""
    # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), padded.
    request = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, LOCK_OFFSET, 1, 0)
    try:
        fcntl.fcntl(fd, command, request)
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES):
            raise BlockingIOError(error.errno, error.strerror) from error
        raise


def _take(fd: int, note: Path, db_path: str, lock: Callable[[], None]) -> None:
    try:
        lock()
    except BlockingIOError:
        os.close(fd)
        raise DataDirInUse(
            f"another tunefleet server (pid {_holder(note)}) is already using the SQLite "
            f"database {db_path} (it holds a lock on that file): stop it first, or give this "
            "one its own --data-dir; to run several orchestrators on one database use "
            "PostgreSQL (docs/operations.md, high availability)"
        ) from None


def _holder(note: Path) -> str:
    try:
        return note.read_text(errors="replace").strip()[:32] or "unknown"
    except OSError:
        return "unknown"


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
