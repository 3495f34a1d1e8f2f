"""The role of one process (http/leadership.Leadership) in-process on PostgreSQL: it
starts active on a free lease, stands by on a held one and takes over when it is
released, and steps down when a write finds its term over or taking over fails."""

from __future__ import annotations

import asyncio
from pathlib import Path

import peewee as pw
import pytest

from tunefleet.http.leadership import Leadership
from tunefleet.storage.database import Database, open_database
from tunefleet.storage.leadership import LeadershipLost, release, try_acquire
from tunefleet.storage.urls import build_peewee_database, parse_database_url

pytestmark = pytest.mark.postgres


def _raw(url: str, tmp_path: Path) -> pw.Database:
    database = build_peewee_database(parse_database_url(url, tmp_path))
    database.connect()
    database.autocommit = True  # type: ignore[attr-defined]
    return database


async def _until(check: object, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not (callable(check) and check()):
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)


class Harness:
    def __init__(self, db: Database) -> None:
        self.activations = 0
        self.reasons: list[str] = []
        self.leadership = Leadership(
            db, advertise_url="http://me:8001", lease_s=1.0, on_step_down=self.reasons.append
        )

    async def activate(self) -> None:
        self.activations += 1


@pytest.fixture
async def db(pg_url: str, tmp_path: Path) -> Database:
    database = await open_database(pg_url, tmp_path)
    yield database  # type: ignore[misc]
    await database.close()


async def test_a_free_lease_makes_it_active_at_once(db: Database) -> None:
    harness = Harness(db)
    await harness.leadership.start(harness.activate)
    assert harness.leadership.role == "active" and harness.activations == 1
    assert harness.leadership.view() == {
        "role": "active",
        "term": 1,
        "active_url": "http://me:8001",
    }
    await harness.leadership.close()


async def test_a_held_lease_makes_it_wait_and_take_over_when_released(
    db: Database, pg_url: str, tmp_path: Path
) -> None:
    raw = _raw(pg_url, tmp_path)
    assert try_acquire(raw, "other", "http://other:8001", 30.0) == 1
    harness = Harness(db)
    await harness.leadership.start(harness.activate)
    assert harness.leadership.role == "standby" and harness.activations == 0
    assert harness.leadership.active_url == "http://other:8001"
    release(raw, "other", 1)
    await _until(lambda: harness.leadership.role == "active")
    assert harness.activations == 1 and harness.leadership.term == 2
    await harness.leadership.close()
    raw.close()


async def test_a_write_after_the_term_ended_is_refused_and_it_steps_down(
    db: Database, pg_url: str, tmp_path: Path
) -> None:
    harness = Harness(db)
    await harness.leadership.start(harness.activate)
    raw = _raw(pg_url, tmp_path)
    raw.execute_sql("UPDATE leader_lease SET term = term + 1, holder = 'other'")
    with pytest.raises(LeadershipLost):
        await db.write(lambda: None)
    await _until(lambda: harness.reasons)
    assert harness.leadership.role == "stepped_down"
    assert "term 1 is over" in harness.reasons[0]
    with pytest.raises(LeadershipLost, match="stepped down"):
        await db.write(lambda: None)  # nothing more, whatever the lease says now
    await harness.leadership.close()
    raw.close()


async def test_a_failed_takeover_steps_down_rather_than_hold_the_lease_idle(
    db: Database, pg_url: str, tmp_path: Path
) -> None:
    raw = _raw(pg_url, tmp_path)
    assert try_acquire(raw, "other", None, 30.0) == 1
    harness = Harness(db)

    async def broken() -> None:
        raise RuntimeError("boom")

    await harness.leadership.start(broken)
    release(raw, "other", 1)
    await _until(lambda: harness.reasons)
    assert harness.reasons == ["taking over failed: RuntimeError: boom"]
    assert harness.leadership.role == "stepped_down"
    await harness.leadership.close()
    raw.close()
