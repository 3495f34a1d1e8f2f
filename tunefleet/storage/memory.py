"""An in-memory stand-in for the database, for tests of the actors and the scheduler.

The same ``Store`` runs over it: ``memory_store()`` gives a Store whose repositories
(storage/memory_repos.py, storage/memory_records.py) keep rows in dicts
(storage/memory_tables.py) instead of tables, so a fleet can be driven without SQLite
while storage's own tests keep running on SQLite and PostgreSQL.
tests/storage/test_storage_contract.py holds both to one contract (compare-and-set,
unique keys, seq, the audit chain), so they cannot drift.

What it keeps of a database: a write is all or nothing (a failed write leaves the
tables as they were and tells the rollback listeners, as ``Database.write`` does);
reads and writes come back after one turn of the event loop, never inline; rows are
stored through their model fields (a float column gives a float, JSON is copied), and
every read returns fresh copies, so a caller's change to a row changes nothing stored.
Rows live as long as the process: nothing is durable, so restart tests stay on SQLite.
"""

from __future__ import annotations

import time

from tunefleet.storage.memory_approvals import MemoryApprovalRuleRepo
from tunefleet.storage.memory_limits import MemoryLimitRepo
from tunefleet.storage.memory_records import MemoryArtifactRepo, MemoryAuditRepo, MemoryMetricRepo
from tunefleet.storage.memory_repos import MemoryApiTokenRepo, MemoryJobRepo, MemoryWorkerRepo
from tunefleet.storage.memory_tables import MemoryDatabase
from tunefleet.storage.memory_users import MemoryUsageRepo, MemoryUserRepo
from tunefleet.storage.memory_webhooks import MemoryWebhookRepo
from tunefleet.storage.migration_steps import FIRST_ADMIN_USER, FIRST_TEAM
from tunefleet.storage.store import Repos, Store
from tunefleet.storage.store_base import Now
from tunefleet.storage.store_users import ADMIN_ROLE


def memory_store(now: Now = time.time) -> Store:
    """A Store over in-memory repositories: what a fleet test needs, without a database."""
    db = MemoryDatabase()
    tables = db.tables
    repos = Repos(
        MemoryWorkerRepo(now, tables),
        MemoryApiTokenRepo(now, tables),
        MemoryJobRepo(now, tables),
        MemoryAuditRepo(now, tables),
        metrics=MemoryMetricRepo(tables),
        artifacts=MemoryArtifactRepo(now, tables),
        users=MemoryUserRepo(now, tables),
        usage=MemoryUsageRepo(now, tables),
        limits=MemoryLimitRepo(now, tables),
        approval_rules=MemoryApprovalRuleRepo(now, tables),
        webhooks=MemoryWebhookRepo(now, tables),
    )
    # What migration 10 leaves in every database: the first admin in the first team.
    repos.users.create_team(FIRST_TEAM)
    repos.users.create_user(FIRST_ADMIN_USER, role=ADMIN_ROLE, teams=[FIRST_TEAM])
    return Store(db, now=now, repos=repos)
