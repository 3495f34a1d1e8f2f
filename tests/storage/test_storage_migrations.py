"""Migrations: from empty, from version 1 with data, idempotent, newer refused, atomic."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import peewee as pw
import pytest
from storage_testkit import DbTarget

from tunefleet.storage import database, migrations, urls
from tunefleet.storage.database import Database, open_database
from tunefleet.storage.errors import DatabaseUnavailable, SchemaTooNew
from tunefleet.storage.migrations import LATEST_VERSION, Migration, current_version, migrate
from tunefleet.storage.models import ALL_MODELS, database_proxy
from tunefleet.storage.store import Store
from tunefleet.storage.store_audit import GENESIS_HASH, event_hash

V1_AUDIT_FIELDS = {
    "at": 1_600_000_000.5,
    "kind": "worker.register",
    "actor": "w_old",
    "client_address": "10.0.0.7",
    "target": "w_old",
    "outcome": "ok",
    "detail": {"name": "gpu-box"},
}


def _with_raw(target: DbTarget, work: Any) -> Any:
    raw = target.raw()
    raw.connect()
    try:
        return work(raw)
    finally:
        raw.close()


def _build_v1_with_data(raw: pw.Database) -> None:
    """A database exactly as release 1 left it, with a row in most tables."""
    assert migrate(raw, target=1, now=lambda: 1.0).to_version == 1

    def insert(table: str, **values: Any) -> None:
        pw.Table(table, tuple(values)).bind(raw).insert(**values).execute()

    insert(
        "worker", id="w_old", name="gpu-box", worker_type="persistent", state="idle",
        drain_requested=False, is_local=False, labels='{"gpu":"a100"}', agent_labels="{}",
        gpu_info='{"count":2}', gpu_count=2, last_event_id=7, gpu_utilization="[]",
        vram_used_gb="[]", created_at=1.0, updated_at=2.0,
    )  # fmt: skip
    insert("worker_token", worker_id="w_old", token_hash="h" * 64, created_at=1.0)
    full = '["admin.workers","queue.submit","queue.admin","audit.read"]'
    insert("api_token", name="admin", token_hash="a" * 64, permissions=full, created_at=1.0)
    ci = '["queue.submit"]'
    insert("api_token", name="ci", token_hash="c" * 64, permissions=ci, created_at=1.0)
    insert(
        "job", id="j_old", seq=1, config='{"lr":0.1}', env="{}", target="worker",
        worker_labels="{}", gpu_count=1, priority=0, max_retries=3, attempts=1,
        state="running", worker_id="w_old", submitted_at=3.0, updated_at=4.0,
    )  # fmt: skip
    insert("job_attempt", job_id="j_old", number=1, worker_id="w_old", dispatched_at=3.5)
    insert("job_event", job_id="j_old", at=3.5, kind="dispatched", detail="{}")
    insert(
        "audit_event",
        **{**V1_AUDIT_FIELDS, "detail": '{"name":"gpu-box"}'},
        prev_hash=GENESIS_HASH,
        hash=event_hash(GENESIS_HASH, V1_AUDIT_FIELDS),
    )


def _version() -> int:
    """The schema version, read on the DB thread."""
    database = database_proxy.obj
    if database is None:
        raise RuntimeError("not on a database thread")
    return current_version(database)


def _schema_columns() -> dict[str, set[str]]:
    return {
        model._meta.table_name: {c.name for c in database_proxy.get_columns(model._meta.table_name)}
        for model in ALL_MODELS
    }


async def test_empty_database_is_built_to_the_latest_schema(db: Database) -> None:
    assert await db.read(_version) == LATEST_VERSION
    found = await db.read(_schema_columns)
    for model in ALL_MODELS:
        declared = {field.column_name for field in model._meta.sorted_fields}
        assert found[model._meta.table_name] == declared, model.__name__
    indexes = await db.read(lambda: database_proxy.get_indexes("job_log"))
    unique = [index.columns for index in indexes if index.unique]
    assert ["job_id", "attempt", "seq"] in unique


async def test_job_attempts_keep_one_index_by_job(db: Database) -> None:
    """The unique (job_id, number) index alone: the one on job_id that it covers is
    dropped (one page less in every commit that adds an attempt)."""
    indexes = await db.read(lambda: database_proxy.get_indexes("job_attempt"))
    by_job = [(index.columns, index.unique) for index in indexes if "job_id" in index.columns]
    assert by_job == [(["job_id", "number"], True)]


async def test_version_1_database_is_upgraded_with_its_data(db_target: DbTarget) -> None:
    await asyncio.to_thread(_with_raw, db_target, _build_v1_with_data)
    db = await open_database(db_target.url, db_target.data_dir)
    try:
        store = Store(db, now=lambda: 10.0)
        assert await db.read(_version) == LATEST_VERSION
        worker = await store.get_worker("w_old")
        assert worker is not None
        assert (worker.labels, worker.gpu_info, worker.last_event_id) == (
            {"gpu": "a100"},
            {"count": 2},
            7,
        )
        assert worker.offline_at is None  # the column migration 2 added
        assert await store.worker_by_token_hash("h" * 64) == worker
        job = await store.get_job("j_old")
        assert job is not None
        assert (job.seq, job.state, job.config, job.worker_id) == (
            1,
            "running",
            {"lr": 0.1},
            "w_old",
        )
        assert [a.number for a in await store.list_attempts("j_old")] == [1]
        assert [e.kind for e in await store.list_job_events("j_old")] == ["dispatched"]
        # The chain written by release 1 still verifies and goes on.
        await store.append_audit("job.started", target="j_old")
        assert await store.verify_audit() == (True, None)
        # What version 2 brought works on the upgraded database.
        assert await store.append_logs("j_old", 1, []) == 0
        assert (await store.create_job("j_new", config={})).seq == 2
        # And what version 3 brought.
        assert await store.append_metrics("j_old", 1, 10, {"loss": 0.5}, 11.0)
        assert [p.step for p in await store.read_metrics("j_old")] == [10]
        # Version 4: a token that held every permission keeps running commands and local
        # jobs (now permissions of their own); a submit-only token does not gain them.
        admin = await store.api_token_by_hash("a" * 64)
        ci = await store.api_token_by_hash("c" * 64)
        assert admin is not None and ci is not None
        # Version 10 then adds the permissions of users' administration, approval and usage,
        # and version 15 webhooks'.
        assert admin.permissions[-6:] == [
            "queue.command",
            "queue.local",
            "admin.users",
            "queue.approve",
            "usage.read",
            "admin.webhooks",
        ]
        assert ci.permissions == ["queue.submit"]
        # Version 10: every token and job belongs to the user admin, in the team default.
        admin_user = await store.users.user("admin")
        assert admin_user is not None and admin_user.role == "admin"
        assert (admin.user_id, ci.user_id) == (admin_user.id, admin_user.id)
        old_job = await store.get_job("j_old")
        assert old_job is not None and (old_job.user_name, old_job.team_name) == (
            "admin",
            "default",
        )
        # Version 7: the name the agent registered with, empty until it registers again.
        assert worker.agent_name is None
        assert await store.update_worker("w_old", agent_name="old-box")
        updated = await store.get_worker("w_old")
        assert updated is not None and updated.agent_name == "old-box"
        # Version 9: an older job runs isolated if it runs locally; a new one says.
        assert job.local_unisolated is None
        assert (await store.create_job("j_9", config={}, local_unisolated=True)).local_unisolated
    finally:
        await db.close()


def _build_v9_with_local_jobs(raw: pw.Database) -> None:
    """A database as the release with the per-job local runner (schema version 9, before
    users) leaves it: a job whose submitter controlled the orchestrator, and one that ran
    isolated."""
    assert migrate(raw, target=9, now=lambda: 1.0).to_version == 9
    jobs = pw.Table("job").bind(raw)
    for seq, (job_id, unisolated) in enumerate((("j_own", True), ("j_iso", False)), start=1):
        jobs.insert(
            id=job_id, seq=seq, config="{}", env="{}", target="local", worker_labels="{}",
            gpu_count=0, priority=0, max_retries=0, attempts=0, state="pending",
            submitted_at=2.0, updated_at=2.0, local_unisolated=unisolated,
        ).execute()  # fmt: skip


async def test_version_9_database_keeps_its_local_runs_and_gains_owners(
    db_target: DbTarget,
) -> None:
    """Migration 9 (local_unisolated) came before users: a database that already has it
    is upgraded by migration 10 alone, and each job keeps how it runs locally."""
    await asyncio.to_thread(_with_raw, db_target, _build_v9_with_local_jobs)
    db = await open_database(db_target.url, db_target.data_dir)
    try:
        store = Store(db)
        assert await db.read(_version) == LATEST_VERSION
        own, iso = await store.get_job("j_own"), await store.get_job("j_iso")
        assert own is not None and iso is not None
        assert (own.local_unisolated, iso.local_unisolated) == (True, False)
        assert {(j.user_name, j.team_name) for j in (own, iso)} == {("admin", "default")}
    finally:
        await db.close()


async def test_opening_twice_changes_nothing(db_target: DbTarget) -> None:
    for _ in range(2):
        db = await open_database(db_target.url, db_target.data_dir)
        try:
            store = Store(db)
            if await store.get_job("j_1") is None:
                await store.create_job("j_1", config={"a": 1})

            def versions() -> list[int]:
                query = "SELECT version FROM schema_version ORDER BY version"
                return [row[0] for row in database_proxy.execute_sql(query).fetchall()]

            assert await db.read(versions) == [m.version for m in migrations.MIGRATIONS]
            assert [j.id for j in await store.list_jobs()] == ["j_1"]
        finally:
            await db.close()


def test_migrate_reports_what_it_did(db_target: DbTarget) -> None:
    def twice(raw: pw.Database) -> tuple[migrations.MigrationResult, migrations.MigrationResult]:
        return migrate(raw), migrate(raw)

    first, second = _with_raw(db_target, twice)
    assert (first.from_version, first.to_version, first.upgraded) == (0, LATEST_VERSION, True)
    assert (second.from_version, second.to_version, second.upgraded) == (
        LATEST_VERSION,
        LATEST_VERSION,
        False,
    )


async def test_a_newer_database_is_refused(db_target: DbTarget) -> None:
    db = await open_database(db_target.url, db_target.data_dir)
    await db.write(
        lambda: database_proxy.execute_sql(
            "INSERT INTO schema_version (version, description, applied_at) "
            "VALUES (99, 'from the future', 0)"
        )
    )
    await db.close()
    with pytest.raises(SchemaTooNew) as caught:
        await open_database(db_target.url, db_target.data_dir)
    message = str(caught.value)
    assert "schema version 99" in message
    assert f"only knows up to {LATEST_VERSION}" in message
    assert "upgrade tunefleet" in message
    assert "\n" not in message


async def test_a_failing_migration_leaves_the_database_as_it_was(
    db_target: DbTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = await open_database(db_target.url, db_target.data_dir)
    await db.close()

    def broken(database: pw.Database) -> None:
        database.execute_sql("CREATE TABLE scratch (id INTEGER)")
        raise RuntimeError("the next migration is broken")

    broken_one = Migration(LATEST_VERSION + 1, "broken", broken)
    monkeypatch.setattr(migrations, "MIGRATIONS", (*migrations.MIGRATIONS, broken_one))
    with pytest.raises(RuntimeError, match="the next migration is broken"):
        await open_database(db_target.url, db_target.data_dir)

    def state(raw: pw.Database) -> tuple[int, bool]:
        return current_version(raw), "scratch" in raw.get_tables()

    assert await asyncio.to_thread(_with_raw, db_target, state) == (LATEST_VERSION, False)


async def test_two_processes_opening_a_new_database_at_once(db_target: DbTarget) -> None:
    # Two Database objects are two connections, as two processes would be.
    first, second = await asyncio.gather(
        open_database(db_target.url, db_target.data_dir),
        open_database(db_target.url, db_target.data_dir),
    )
    try:
        count = await first.read(
            lambda: database_proxy.execute_sql("SELECT COUNT(*) FROM schema_version").fetchone()[0]
        )
        assert count == len(migrations.MIGRATIONS)
    finally:
        await first.close()
        await second.close()


async def test_a_file_locked_past_the_busy_timeout_is_refused_saying_what_to_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (urls, database):
        monkeypatch.setattr(module, "SQLITE_BUSY_TIMEOUT_MS", 200)
    holder = sqlite3.connect(tmp_path / "tunefleet.db", isolation_level=None)
    holder.execute("CREATE TABLE held (x)")
    holder.execute("BEGIN EXCLUSIVE")  # another tool holding the file, say
    try:
        with pytest.raises(DatabaseUnavailable, match=r"database is locked; check that"):
            await open_database(None, tmp_path)
    finally:
        holder.rollback()
        holder.close()
