"""Errors the storage layer raises on purpose, each with a one-line message saying what to do."""

import errno

from tunefleet.errors import TunefleetError


class StorageError(TunefleetError):
    """Base of the storage layer's deliberate errors."""

    status = 500


class DatabaseUrlError(StorageError):
    """The database URL cannot be used (unknown scheme, missing database name...)."""


class DatabaseUnavailable(StorageError):
    """The database could not be opened or reached."""

    status = 503


class DatabaseClosed(StorageError):
    """A read or write was submitted after `Database.close()`."""

    status = 503


class SchemaTooNew(StorageError):
    """The database was written by a newer tunefleet; this one must not touch it."""


class AlreadyExists(StorageError):
    """A row with this id (or token hash) already exists."""

    status = 409


class Missing(StorageError):
    """A user or team named in a request does not exist (the message names it)."""

    status = 404


class LastAdmin(StorageError):
    """The change would leave no enabled admin."""

    status = 409


class StorageFull(StorageError):
    """The database's disk is full: the write was not stored (nothing of it was kept)."""

    status = 507


# SQLite's SQLITE_FULL; PostgreSQL's disk_full SQLSTATE.
_SQLITE_FULL = 13
_PG_DISK_FULL = "53100"


def is_disk_full(error: BaseException) -> bool:
    """Whether `error`, or one it wraps (peewee keeps the driver's error as its first
    argument and as its context), says the disk is full."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if getattr(current, "sqlite_errorcode", None) == _SQLITE_FULL:
            return True
        if getattr(current, "pgcode", None) == _PG_DISK_FULL:
            return True
        if isinstance(current, OSError) and current.errno in _NO_SPACE:
            return True
        if "database or disk is full" in str(current):
            return True
        wrapped = [a for a in current.args[:1] if isinstance(a, BaseException)]
        pending.extend([current.__cause__, current.__context__, *wrapped])
    return False


_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
