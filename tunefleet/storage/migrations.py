"""Versioned schema migrations, applied in order on open.

`schema_version` holds one row per applied migration; the database's version is the
highest. Opening an older database upgrades it in ONE transaction (all or nothing); a
newer one is refused with SchemaTooNew so an old release never writes to a schema it
does not understand. Policy: migrations only add (tables, nullable columns, indexes) so
a rollback to a backup is the way back, and every migration is written once and frozen;
the one exception drops an index that another one covers (8: nothing reads or writes
differently without it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import peewee as pw

from tunefleet.storage import migration_steps as steps
from tunefleet.storage.errors import SchemaTooNew

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "Migration",
    "MigrationResult",
    "SchemaTooNew",
    "current_version",
    "migrate",
]

_VERSION_TABLE = "schema_version"


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    apply: Callable[[pw.Database], None]


@dataclass(frozen=True, slots=True)
class MigrationResult:
    from_version: int
    to_version: int

    @property
    def upgraded(self) -> bool:
        return self.to_version != self.from_version


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", steps.initial_schema),
    Migration(
        2, "job logs, worker offline_at, indexes for listing queries", steps.job_logs_and_indexes
    ),
    Migration(3, "job metric history", steps.job_metrics),
    Migration(
        4,
        "tokens holding every permission gain queue.command and queue.local",
        steps.full_tokens_keep_command_and_local,
    ),
    Migration(
        5, "artifacts: upload tokens, objects, checkpoints, multipart uploads", steps.artifacts
    ),
    Migration(6, "leader lease for standby orchestrators on PostgreSQL", steps.leader_lease),
    Migration(7, "worker agent_name", steps.worker_agent_name),
    Migration(
        8,
        "drop job_attempt's index on job_id that (job_id, number) covers",
        steps.drop_covered_attempt_index,
    ),
    Migration(9, "job local_unisolated", steps.job_local_unisolated),
    Migration(
        10, "users, teams and memberships; tokens and jobs belong to one", steps.users_and_teams
    ),
    Migration(11, "job_attempt log_bytes and log_lines_dropped", steps.attempt_log_quota),
    Migration(12, "team GPU-hour budgets; job_attempt ended_at index", steps.team_budgets),
    Migration(
        13,
        "concurrency limits: the fleet's setting row, team max_jobs and max_gpus",
        steps.concurrency_limits,
    ),
    Migration(14, "approval rules", steps.approval_rules),
    Migration(15, "team GPU quotas, fair-share weights, borrowing limits", steps.team_quotas),
    Migration(16, "webhooks: subscriptions, outbox, deliveries, attempts", steps.webhooks),
    Migration(
        17,
        "job_attempt kind and signature; worker quarantine_reason and quarantined_at",
        steps.failure_kinds_and_quarantine,
    ),
)
LATEST_VERSION = MIGRATIONS[-1].version


def current_version(database: pw.Database) -> int:
    """The schema version of an open database; 0 when it is empty."""
    if _VERSION_TABLE not in database.get_tables():
        return 0
    row = database.execute_sql(f'SELECT MAX("version") FROM "{_VERSION_TABLE}"').fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def migrate(
    database: pw.Database,
    *,
    target: int | None = None,
    now: Callable[[], float] = time.time,
) -> MigrationResult:
    """Bring `database` to `target` (None: the latest) in one transaction.

    Safe to call on every open (idempotent) and from two processes at once: the writer
    lock (SQLite BEGIN IMMEDIATE, a PostgreSQL advisory lock) is taken before the version
    is read, so the second one finds the work done.
    """
    latest = MIGRATIONS[-1].version
    target = latest if target is None else min(target, latest)
    is_sqlite = isinstance(database, pw.SqliteDatabase)
    outermost = database.transaction_depth() == 0
    txn = database.atomic("IMMEDIATE") if is_sqlite and outermost else database.atomic()
    with txn:
        if isinstance(database, pw.PostgresqlDatabase):
            database.execute_sql(
                "SELECT pg_advisory_xact_lock(hashtext('tunefleet-migrate:' || current_schema()))"
            )
        found = current_version(database)
        if found > latest:
            raise SchemaTooNew(
                f"the database has schema version {found} but this tunefleet only knows up to "
                f"{latest}: upgrade tunefleet (or restore a backup made before the "
                "newer release touched it)"
            )
        table = pw.Table(_VERSION_TABLE, ("version", "description", "applied_at"))
        for migration in MIGRATIONS:
            if found < migration.version <= target:
                migration.apply(database)
                table.bind(database).insert(
                    version=migration.version,
                    description=migration.description,
                    applied_at=now(),
                ).execute()
    return MigrationResult(from_version=found, to_version=max(found, target))
