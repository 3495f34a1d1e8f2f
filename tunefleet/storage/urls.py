"""Database URLs: which backend, where, and the peewee database object for it.

Accepted forms (see docs/storage.md):
- None or "" → SQLite file `<data_dir>/tunefleet.db`
- `sqlite:///absolute/path.db`, `sqlite://relative.db` (relative to the data directory),
  `sqlite:///:memory:` (one connection only, so fine here: the DB thread owns it)
- `postgresql://user[:password]@host[:port]/dbname[?libpq_param=value...]`, also `postgres://`
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

import peewee as pw

from tunefleet.storage.errors import DatabaseUrlError
from tunefleet.storage.postgres import DeferringConnection, DeferringPostgresqlDatabase

DEFAULT_SQLITE_NAME = "tunefleet.db"
SQLITE_BUSY_TIMEOUT_MS = 5000
# The WAL's bound, in pages (4 KiB each): past it the commit itself checkpoints. The
# database thread checkpoints when idle long before (database.py), so this is reached
# only by a thread that never idles; 4x SQLite's default, 16 MiB.
WAL_AUTOCHECKPOINT_PAGES = 4000
POSTGRES_CONNECT_TIMEOUT_S = 5
_URL_HINT = "use sqlite:///path/to/file.db or postgresql://user@host:5432/dbname"

Backend = Literal["sqlite", "postgresql"]


@dataclass(frozen=True, slots=True)
class DatabaseConfig:
    backend: Backend
    description: str  # for messages and logs; never holds a password
    sqlite_path: str | None = None  # a file path or ":memory:"
    pg_database: str | None = None
    pg_params: dict[str, str | int] = field(default_factory=dict)


def parse_database_url(url: str | None, data_dir: Path) -> DatabaseConfig:
    """Read a database URL; raise DatabaseUrlError with a one-line fix when it is unusable."""
    if not url:
        return _sqlite_config(str(data_dir / DEFAULT_SQLITE_NAME))
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise DatabaseUrlError(f"database URL {_mask(url)!r} has no scheme: {_URL_HINT}")
    if scheme == "sqlite":
        return _parse_sqlite(rest, data_dir)
    if scheme in ("postgresql", "postgres"):
        return _parse_postgres(url)
    raise DatabaseUrlError(
        f"unsupported database URL scheme {scheme!r} in {_mask(url)!r}: {_URL_HINT}"
    )


def _parse_sqlite(rest: str, data_dir: Path) -> DatabaseConfig:
    path = unquote(rest.split("?", 1)[0])
    if path in ("", "/"):
        return _sqlite_config(str(data_dir / DEFAULT_SQLITE_NAME))
    if path in (":memory:", "/:memory:"):
        return _sqlite_config(":memory:")
    resolved = Path(path) if path.startswith("/") else data_dir / path
    return _sqlite_config(str(resolved))


def _sqlite_config(path: str) -> DatabaseConfig:
    url = f"sqlite://{path}" if path.startswith("/") else f"sqlite:///{path}"
    return DatabaseConfig(backend="sqlite", description=url, sqlite_path=path)


def _parse_postgres(url: str) -> DatabaseConfig:
    parts = urlsplit(url)
    dbname = unquote(parts.path.lstrip("/"))
    if not dbname:
        raise DatabaseUrlError(
            f"PostgreSQL URL {_mask(url)!r} names no database: "
            "use postgresql://user@host:5432/dbname"
        )
    try:
        port = parts.port or 5432
    except ValueError:
        raise DatabaseUrlError(
            f"PostgreSQL URL {_mask(url)!r} has an invalid port: use a number, e.g. host:5432"
        ) from None
    host = parts.hostname or "localhost"
    params: dict[str, str | int] = {"host": host, "port": port}
    if parts.username:
        params["user"] = unquote(parts.username)
    if parts.password:
        params["password"] = unquote(parts.password)
    params["connect_timeout"] = POSTGRES_CONNECT_TIMEOUT_S
    params["application_name"] = "tunefleet"
    # Query parameters are libpq connection parameters (sslmode, options, ...).
    params.update(dict(parse_qsl(parts.query)))
    user = f"{params['user']}@" if "user" in params else ""
    description = f"postgresql://{user}{params['host']}:{params['port']}/{dbname}"
    return DatabaseConfig(
        backend="postgresql", description=description, pg_database=dbname, pg_params=params
    )


def _mask(url: str) -> str:
    """The URL without its password, fit for a message."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def build_peewee_database(config: DatabaseConfig) -> pw.Database:
    """A peewee database (not yet connected) for the config, with tunefleet's settings.

    SQLite: WAL (readers never block the writer), foreign keys on, a busy timeout for other
    processes holding the lock (backups, a second tool), synchronous=FULL so a committed
    write survives power loss, a WAL checkpointed by the commit itself only past
    WAL_AUTOCHECKPOINT_PAGES. Write transactions BEGIN IMMEDIATE so a writer takes the
    lock up front instead of failing when it upgrades from reading.

    temp_store=MEMORY: the statement journal (the pages a write's savepoint or a statement
    may have to undo) stays in memory. At the default it spills to a temporary file once
    past 64 KiB, which one job write (5 to 25 pages) can reach, and the rest of that
    transaction then writes every undo page to that file. It is never durable data; its
    size is what one write or statement changes, which tunefleet keeps small.
    """
    if config.backend == "sqlite":
        path = config.sqlite_path or ":memory:"
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        return _SqliteDatabase(
            path,
            pragmas=[
                ("journal_mode", "wal"),
                ("foreign_keys", 1),
                ("busy_timeout", SQLITE_BUSY_TIMEOUT_MS),
                ("synchronous", "FULL"),
                ("wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES),
                ("temp_store", "memory"),
            ],
            timeout=SQLITE_BUSY_TIMEOUT_MS / 1000,
            thread_safe=False,
        )
    params: dict[str, Any] = dict(config.pg_params)
    # BEGIN and savepoints wait to ride with the next statement (storage/postgres.py).
    return DeferringPostgresqlDatabase(
        config.pg_database, thread_safe=False, connection_factory=DeferringConnection, **params
    )


class _SqliteDatabase(pw.SqliteDatabase):
    """peewee's SQLite database, but a ROLLBACK of a transaction SQLite has already rolled
    back itself is skipped. After SQLITE_FULL (or an I/O error, or running out of memory)
    SQLite may end the transaction on its own; peewee's ROLLBACK then failed with "cannot
    rollback - no transaction is active", hiding the disk-full error behind it."""

    def rollback(self) -> None:
        if not self.is_closed() and not self.connection().in_transaction:
            return
        super().rollback()
