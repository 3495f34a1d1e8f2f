"""PostgreSQL round trips: BEGIN and savepoints ride with the next statement.

Every string sent to the server is counted (a round trip each), so a saving cannot
silently go; and a failing write must still undo only itself. PostgreSQL only: skipped
with the reason when the server cannot be reached (conftest's db_target).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from typing import Any

import peewee as pw
import psycopg2
import psycopg2.extensions
import pytest
from storage_testkit import kill_connection
from test_storage_database import _hold_thread, _insert_worker, _queued, _worker_ids

from tunefleet.storage.database import Database
from tunefleet.storage.models import Worker, database_proxy
from tunefleet.storage.postgres import DeferringCursor
from tunefleet.storage.statements import SavepointLost, insert_row, update_each

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.parametrize("db_target", ["postgresql"], indirect=True),
]


class _Sent(psycopg2.extensions.cursor):
    """Below DeferringCursor: sees each string as it goes to the server."""

    sent: list[str] = []

    def execute(self, query: Any, vars: Any = None) -> None:
        text = query.decode() if isinstance(query, bytes) else str(query)
        _Sent.sent.append(text)
        return super().execute(query, vars)

    def executemany(self, query: Any, vars_list: Any) -> None:
        rows = list(vars_list)
        _Sent.sent.extend([str(query)] * len(rows))  # psycopg2 runs one per row
        return super().executemany(query, rows)


class _CountingCursor(DeferringCursor, _Sent):
    pass


async def _count_round_trips(db: Database) -> list[str]:
    sent: list[str] = []
    _Sent.sent = sent

    def install() -> None:
        database_proxy.connection().cursor_factory = _CountingCursor

    await db.read(install)
    sent.clear()
    return sent


def _fence(database: pw.Database) -> None:
    database.execute_sql("SELECT 1")


def _rename(worker_id: str, name: str) -> Callable[[], None]:
    def rename() -> None:
        Worker.update(name=name).where(Worker.id == worker_id).execute()

    return rename


def _shapes(sent: list[str]) -> list[list[str]]:
    """Each round trip as its statements' first two words (savepoint names dropped)."""
    return [
        [re.sub(r"_\d+$", "", " ".join(s.split()[:2])) for s in trip.split(";")] for trip in sent
    ]


async def test_a_lone_fenced_write_is_its_statements_the_fence_and_the_commit(
    db: Database,
) -> None:
    db.set_write_fence(_fence)
    sent = await _count_round_trips(db)

    def insert_and_rename() -> None:
        _insert_worker("w_one")()
        _rename("w_one", "renamed")()

    await db.write(insert_and_rename)
    # BEGIN goes with the fence: 4 round trips, not 5.
    assert _shapes(sent) == [
        ["BEGIN", "SELECT 1"],
        ["INSERT INTO"],
        ['UPDATE "worker"'],
        ["COMMIT"],
    ]


async def test_a_group_sends_each_savepoint_with_its_writes_first_statement(
    db: Database,
) -> None:
    db.set_write_fence(_fence)
    sent = await _count_round_trips(db)
    gate, held = await _hold_thread(db)
    writes = [asyncio.create_task(db.write(_insert_worker(f"w_{n}"))) for n in range(3)]
    await _queued(db, 3)
    gate.release.set()
    await held
    assert [await write for write in writes] == ["w_0", "w_1", "w_2"]
    # 5 round trips; one each for BEGIN, SAVEPOINT and RELEASE SAVEPOINT made it 12.
    assert _shapes(sent) == [
        ["BEGIN", "SELECT 1"],
        ["SAVEPOINT write", "INSERT INTO"],
        ["RELEASE SAVEPOINT", "SAVEPOINT write", "INSERT INTO"],
        ["RELEASE SAVEPOINT", "SAVEPOINT write", "INSERT INTO"],
        ["COMMIT"],
    ]
    assert await db.read(_worker_ids) == ["w_0", "w_1", "w_2"]


async def test_a_transaction_that_sends_nothing_costs_no_round_trip(db: Database) -> None:
    sent = await _count_round_trips(db)
    assert await db.write(lambda: "nothing to store") == "nothing to store"
    assert await db.read(lambda: "nothing to read") == "nothing to read"
    assert sent == []
    await db.read(_worker_ids)
    assert _shapes(sent) == [["BEGIN", 'SELECT "t1"."id"'], ["COMMIT"]]


async def test_a_failing_write_undoes_only_itself_whichever_statement_fails(
    db: Database,
) -> None:
    await db.write(_insert_worker("w_existing"))

    def insert_then_duplicate() -> None:
        _insert_worker("w_undone")()
        _insert_worker("w_existing")()

    def fail_before_any_statement() -> None:
        raise ValueError("changed my mind")

    sent = await _count_round_trips(db)
    gate, held = await _hold_thread(db)
    first = asyncio.create_task(db.write(_insert_worker("w_a")))
    # Its first statement fails: it went with its own SAVEPOINT and w_a's RELEASE.
    duplicate = asyncio.create_task(db.write(_insert_worker("w_existing")))
    later = asyncio.create_task(db.write(insert_then_duplicate))
    early = asyncio.create_task(db.write(fail_before_any_statement))
    last = asyncio.create_task(db.write(_insert_worker("w_b")))
    await _queued(db, 5)
    gate.release.set()
    await held
    assert await first == "w_a"
    with pytest.raises(pw.IntegrityError):
        await duplicate
    with pytest.raises(pw.IntegrityError):
        await later
    with pytest.raises(ValueError, match="changed my mind"):
        await early
    assert await last == "w_b"
    assert await db.read(_worker_ids) == ["w_a", "w_b", "w_existing"]
    rollbacks = [trip for trip in sent if trip.startswith("ROLLBACK TO SAVEPOINT")]
    assert len(rollbacks) == 2  # the write that sent nothing had nothing to undo


async def test_a_savepoint_that_never_ran_fails_the_whole_group_not_an_older_write(
    db: Database,
) -> None:
    """A syntax error: PostgreSQL runs none of the string, so the write's SAVEPOINT never
    ran either. Rolling back to an older savepoint would undo a write answered as
    written; instead the group fails whole and nobody is told it was written."""

    def malformed() -> None:
        database_proxy.execute_sql("SELEC 1")

    gate, held = await _hold_thread(db)
    first = asyncio.create_task(db.write(_insert_worker("w_a")))
    broken = asyncio.create_task(db.write(malformed))
    last = asyncio.create_task(db.write(_insert_worker("w_b")))
    await _queued(db, 3)
    gate.release.set()
    await held
    with pytest.raises(SavepointLost):
        await broken
    for write in (first, last):
        with pytest.raises(pw.PeeweeException):
            await write
    assert await db.read(_worker_ids) == []
    assert await db.write(_insert_worker("w_after")) == "w_after"


async def test_a_transaction_left_aborted_is_never_taken_for_committed(db: Database) -> None:
    """A write that swallows a database error without a savepoint leaves the transaction
    aborted: PostgreSQL answers its COMMIT with ROLLBACK, and the caller must hear it."""
    await db.write(_insert_worker("w_existing"))

    def insert_and_swallow_duplicate() -> str:
        _insert_worker("w_lost")()
        with contextlib.suppress(pw.IntegrityError):
            _insert_worker("w_existing")()
        return "written?"

    with pytest.raises(pw.OperationalError, match="rolled back"):
        await db.write(insert_and_swallow_duplicate)
    assert await db.read(_worker_ids) == ["w_existing"]


# --- the statements built once (storage/statements.py): prepared once per connection ----


def _insert_worker_planned(worker_id: str, name: Any = None) -> Callable[[], str]:
    def insert() -> str:
        insert_row(
            Worker,
            {
                "id": worker_id,
                "name": worker_id if name is None else name,
                "worker_type": "persistent",
                "state": "idle",
                "created_at": 1.0,
                "updated_at": 1.0,
            },
            encoded=("name",),  # as given: psycopg2 binds it, or refuses to
        )
        return worker_id

    return insert


def _prepares(sent: list[str]) -> list[str]:
    return [s.split()[1] for trip in sent for s in trip.split(";") if s.startswith("PREPARE")]


async def test_a_planned_statement_is_prepared_with_its_first_run_and_then_run_by_name(
    db: Database,
) -> None:
    sent = await _count_round_trips(db)
    await db.write(_insert_worker_planned("w_1"))
    await db.write(_insert_worker_planned("w_2"))
    assert _shapes(sent) == [
        ["BEGIN", "PREPARE tf", "EXECUTE tf"],
        ["COMMIT"],
        ["BEGIN", "EXECUTE tf"],
        ["COMMIT"],
    ]
    assert await db.read(_worker_ids) == ["w_1", "w_2"]


async def test_a_failed_first_run_is_prepared_afresh_under_a_new_name(db: Database) -> None:
    await db.write(_insert_worker("w_existing"))
    sent = await _count_round_trips(db)
    with pytest.raises(pw.IntegrityError):
        await db.write(_insert_worker_planned("w_existing"))
    with pytest.raises(pw.ProgrammingError):  # a value it cannot bind: nothing sent
        await db.write(_insert_worker_planned("w_unbound", name=object()))
    assert await db.write(_insert_worker_planned("w_new")) == "w_new"
    assert await db.write(_insert_worker_planned("w_newer")) == "w_newer"
    first, second = _prepares(sent)
    assert first != second
    assert await db.read(_worker_ids) == ["w_existing", "w_new", "w_newer"]


async def test_a_new_connection_prepares_again(db: Database) -> None:
    await db.write(_insert_worker_planned("w_before"))
    await kill_connection(db)
    with pytest.raises(pw.DatabaseError):
        await db.write(_insert_worker_planned("w_lost"))
    sent = await _count_round_trips(db)
    assert await db.write(_insert_worker_planned("w_after")) == "w_after"
    assert len(_prepares(sent)) == 1
    assert await db.read(_worker_ids) == ["w_after", "w_before"]


async def test_a_statement_run_once_per_row_sends_what_is_pending_once(db: Database) -> None:
    """executemany (many workers' heartbeats in one write) runs a statement per row, so
    what is pending goes before it on its own, once."""
    await db.write(_insert_worker("w_1"))
    await db.write(_insert_worker("w_2"))
    sent = await _count_round_trips(db)

    def beat() -> int:
        return update_each(Worker, ["last_heartbeat_at"], "id", [(5.0, "w_1"), (6.0, "w_2")])

    assert await db.write(beat) == 2
    assert _shapes(sent) == [["BEGIN"], ['UPDATE "worker"'], ['UPDATE "worker"'], ["COMMIT"]]
