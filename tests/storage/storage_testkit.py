"""Helpers shared by the storage tests (imported by conftest and the test modules)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import peewee as pw
import psycopg2

from tunefleet.storage.database import Database
from tunefleet.storage.models import database_proxy
from tunefleet.storage.rows import AttemptsApart
from tunefleet.storage.store import Store
from tunefleet.storage.urls import build_peewee_database, parse_database_url

# The shared test server: trust auth, so no password.
PG_HOST, PG_PORT, PG_DB, PG_USER = "127.0.0.1", 5432, "test", "postgres"


def pg_connect() -> psycopg2.extensions.connection:
    """An autocommit admin connection to the test server (schemas, killing backends)."""
    conn = psycopg2.connect(
        host=PG_HOST, port=PG_PORT, dbname=PG_DB, user=PG_USER, connect_timeout=3
    )
    conn.autocommit = True
    return conn


@dataclass(frozen=True)
class DbTarget:
    """Where a test's database lives: what to pass to open_database."""

    backend: str
    url: str | None
    data_dir: Path

    def raw(self) -> pw.Database:
        """A peewee database for this target on the calling thread (to build fixtures)."""
        return build_peewee_database(parse_database_url(self.url, self.data_dir))


@dataclass(frozen=True)
class Line:
    """A log line as append_logs reads one (store_jobs.LogLineLike)."""

    seq: int
    stream: str
    line: str
    at: float


async def race_to_dispatch(store: Store, job_id: str, racers: int) -> list[bool]:
    """`racers` concurrent compare-and-sets of pending job `job_id` to dispatched, the
    i-th naming worker w_i: what each got back, in racer order."""
    results = await asyncio.gather(
        *(
            store.cas_job_state(job_id, "pending", "dispatched", worker_id=f"w_{i}")
            for i in range(racers)
        )
    )
    return list(results)


async def kill_connection(db: Database) -> None:
    """End the PostgreSQL session behind ``db``'s connection from another one, as a
    server restart or a network cut would: its next call meets a dead connection."""
    pid = await db.read(lambda: database_proxy.execute_sql("SELECT pg_backend_pid()").fetchone()[0])
    admin = await asyncio.to_thread(pg_connect)
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", (pid,))
    finally:
        admin.close()


async def count_attempts_apart_of_a_page(store: Store) -> None:
    """Undelivered and preempted attempts by their outcome; infrastructure failures and
    shutdowns by their kind (a lost attempt from before kinds were stored has none and
    spent a retry then)."""
    for job_id, ends in {
        "j_1": [("undelivered", None), ("lost", None), ("undelivered", None)],
        "j_2": [("lost", "infrastructure"), ("failed", "infrastructure"), ("preempted", None)],
        "j_4": [("failed", "job_error"), ("lost", "worker_shutdown"), ("completed", None)],
    }.items():
        await store.create_job(job_id, config={})
        for number, (outcome, kind) in enumerate(ends, start=1):
            await store.start_attempt(job_id, number, worker_id="w_1")
            await store.end_attempt(job_id, number, outcome=outcome, kind=kind)
    await store.create_job("j_3", config={})
    assert await store.count_attempts_apart(["j_1", "j_2", "j_3", "j_4"]) == {
        "j_1": AttemptsApart(undelivered=2),
        "j_2": AttemptsApart(preempted=1, infrastructure=2),
        "j_4": AttemptsApart(infrastructure=1),
    }
    assert await store.count_attempts_apart(["j_1"]) == {"j_1": AttemptsApart(undelivered=2)}
    assert await store.count_attempts_apart([]) == {}
