"""Storage fixtures: every backend-parametrized test runs on SQLite and on PostgreSQL.

PostgreSQL isolation: the server (127.0.0.1:5432, database `test`, user postgres, trust
auth) is shared with other people's test runs, so each test gets its own freshly created
schema, selected through the URL's `options=-csearch_path=...`, and dropped afterwards.
When the server is unreachable the postgresql parameter is skipped with the reason.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg2
import pytest
from storage_testkit import PG_DB, PG_HOST, PG_PORT, PG_USER, DbTarget, pg_connect

from tunefleet.storage.database import Database, open_database
from tunefleet.storage.store import Store

_pg_error: list[str | None] = []  # probed once per session; [None] means reachable


def _pg_unreachable() -> str | None:
    if not _pg_error:
        try:
            pg_connect().close()
        except psycopg2.Error as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            _pg_error.append(first_line)
        else:
            _pg_error.append(None)
    return _pg_error[0]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DbTarget]:
    if request.param == "sqlite":
        yield DbTarget("sqlite", None, tmp_path)  # None: the default file in data_dir
        return
    error = _pg_unreachable()
    if error is not None:
        pytest.skip(f"PostgreSQL not reachable on {PG_HOST}:{PG_PORT}: {error}")
    schema = f"tf_test_{uuid.uuid4().hex[:16]}"
    admin = pg_connect()
    try:
        with admin.cursor() as cursor:
            cursor.execute("SET lock_timeout = '10s'")
            cursor.execute(f'CREATE SCHEMA "{schema}"')
        options = quote(f"-csearch_path={schema}")
        url = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{PG_DB}?options={options}"
        yield DbTarget("postgresql", url, tmp_path)
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.close()


@pytest.fixture
async def db(db_target: DbTarget) -> AsyncIterator[Database]:
    database = await open_database(db_target.url, db_target.data_dir)
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
def clock() -> list[float]:
    """A settable time for the store: clock[0] is "now"."""
    return [1_700_000_000.0]


@pytest.fixture
def store(db: Database, clock: list[float]) -> Store:
    return Store(db, now=lambda: clock[0])
