"""Errors the storage layer raises on purpose, each with a one-line message saying what to do."""

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
