"""Migrations 9 and 10 on a copy of a database that release 8 made through its own API
(release_db/make_release_db.py): every row and value is still there, every job runs
isolated if it runs locally (9), and every token and job now belongs to the user `admin`
in the team `default` (10)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

from tunefleet.http.tokens import hash_token
from tunefleet.storage.database import open_database
from tunefleet.storage.migrations import LATEST_VERSION
from tunefleet.storage.store import Store

RELEASE_DB = Path(__file__).parent / "release_db" / "release-v8.db"
RELEASE_ADMIN_TOKEN = "tf_release-v8-admin-token-0123456789abcdefghijklmnopq"
FULL_RELEASE_8 = [
    "admin.workers",
    "queue.submit",
    "queue.admin",
    "audit.read",
    "queue.command",
    "queue.local",
]


def _tables(path: Path) -> dict[str, tuple[list[str], list[tuple[Any, ...]]]]:
    """Every table's columns and rows, in id order."""
    with sqlite3.connect(path) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        found = {}
        for name in names:
            columns = [row[1] for row in conn.execute(f'PRAGMA table_info("{name}")')]
            rows = conn.execute(f'SELECT * FROM "{name}" ORDER BY 1').fetchall()
            found[name] = (columns, rows)
    return found


async def test_a_release_8_database_keeps_everything_and_gains_its_owner(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    copy = data_dir / "tunefleet.db"
    shutil.copyfile(RELEASE_DB, copy)
    before = _tables(copy)
    assert max(v for (v, *_) in before["schema_version"][1]) == 8
    assert len(before["job"][1]) == 3 and len(before["api_token"][1]) == 4

    db = await open_database(None, data_dir)
    try:
        store = Store(db)
        tokens = await store.list_api_tokens(include_revoked=True)
        admin = (await store.users.users())[0]
        assert (admin.name, admin.role, admin.disabled) == ("admin", "admin", False)
        assert [t.user_id for t in tokens] == [admin.id] * 4
        # Tokens that held all of release 8 gain the new permissions; the others do not.
        for token in tokens:
            if token.name in ("admin", "ops"):
                assert token.permissions == [
                    *FULL_RELEASE_8,
                    "admin.users",
                    "queue.approve",
                    "usage.read",
                    "admin.webhooks",  # migration 16, to tokens holding everything
                ]
        by_name = {t.name: t for t in tokens}
        assert by_name["ci"].permissions == ["queue.submit"]
        assert by_name["old"].revoked_at is not None
        # The release's admin token still signs in, as the user admin.
        signed_in = await store.api_token_by_hash(hash_token(RELEASE_ADMIN_TOKEN))
        assert signed_in is not None and signed_in.user_id == admin.id
        jobs = await store.list_jobs(order="seq")
        assert [(j.user_name, j.team_name) for j in jobs] == [("admin", "default")] * 3
        assert [j.local_unisolated for j in jobs] == [None] * 3
        assert [j.submitted_by for j in jobs] == ["token:admin#1", "token:ci#2", "token:ops#3"]
        facts = await store.users.facts(admin.id)
        assert facts is not None and facts.default_team == "default"
        assert await store.verify_audit() == (True, None)
    finally:
        await db.close()

    after = _tables(copy)
    versions = [v for (v, *_) in after["schema_version"][1]]
    assert versions == list(range(1, LATEST_VERSION + 1)) and LATEST_VERSION >= 10
    # Every row of every table the release had, each of its values unchanged (but the
    # permissions migration 10 extends, checked above).
    for table, (columns, rows) in before.items():
        new_columns, new_rows = after[table]
        assert new_columns[: len(columns)] == columns, table
        kept = [row[: len(columns)] for row in new_rows]
        if table == "schema_version":
            kept = kept[: len(rows)]
        if table == "api_token":
            at = columns.index("permissions")
            rows = [row[:at] + row[at + 1 :] for row in rows]
            kept = [row[:at] + row[at + 1 :] for row in kept]
        assert kept == rows, table
