"""A private PostgreSQL schema per test on the shared server (127.0.0.1:5432, database
`test`, trust auth), so parallel runs by other people never see each other's rows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import psycopg2

PG_HOST, PG_PORT, PG_DB, PG_USER = "127.0.0.1", 5432, "test", "postgres"


def admin_connection() -> psycopg2.extensions.connection:
    conn = psycopg2.connect(
        host=PG_HOST, port=PG_PORT, dbname=PG_DB, user=PG_USER, connect_timeout=3
    )
    conn.autocommit = True
    return conn


def unreachable_reason() -> str | None:
    """Why PostgreSQL cannot be used here (None: it can)."""
    try:
        admin_connection().close()
    except psycopg2.Error as exc:
        lines = str(exc).strip().splitlines()
        return f"PostgreSQL not reachable on {PG_HOST}:{PG_PORT}: {lines[0] if lines else exc!r}"
    return None


@contextmanager
def private_schema(prefix: str = "tf_ha") -> Iterator[str]:
    """A fresh schema; yields the database URL that selects it. Dropped afterwards."""
    schema = f"{prefix}_{uuid.uuid4().hex[:16]}"
    admin = admin_connection()
    try:
        with admin.cursor() as cursor:
            cursor.execute("SET lock_timeout = '10s'")
            cursor.execute(f'CREATE SCHEMA "{schema}"')
        options = quote(f"-csearch_path={schema}")
        yield f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{PG_DB}?options={options}"
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.close()
