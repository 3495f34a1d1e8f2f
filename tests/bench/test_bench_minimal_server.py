"""The yardstick (bench/minimal_server.py) serves the benchmarks' load generator: its
workers register, hold streams, heartbeat, and take, acknowledge and complete jobs, and
what it answered is in its database. Plus the protocol's refusals, over plain HTTP."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import peewee as pw
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.loadgen import LoadGenProcess  # noqa: E402
from bench.minimal_server import TUNEFLEET_SCHEMA  # noqa: E402
from bench.orchestrator_proc import ADMIN_TOKEN, MinimalServer, MinimalServerWithRows  # noqa: E402
from tunefleet.storage.migrations import migrate  # noqa: E402
from tunefleet.storage.rows import AuditEventRow  # noqa: E402
from tunefleet.storage.store_audit import GENESIS_HASH, check_rows  # noqa: E402


@pytest.fixture
def server(tmp_path: Path) -> Iterator[MinimalServer]:
    proc = MinimalServer(tmp_path / "server").start(timeout_s=30)
    try:
        yield proc
    finally:
        proc.stop()


def stored(server: MinimalServer, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(server.data_dir / "minimal.db") as conn:
        return conn.execute(sql).fetchall()


def call(server: MinimalServer, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.e2e
def test_the_load_generator_runs_job_cycles_through_it(
    server: MinimalServer, tmp_path: Path
) -> None:
    gen = LoadGenProcess(server.port, server.pid, tmp_path / "loadgen.log", pool=4).start()
    try:
        gen.call("create_workers", count=3, timeout_s=20)
        gen.call("register", timeout_s=20)
        assert gen.call("open_streams", timeout_s=20)["result"]["streams"] == 3
        gen.call("set_mode", on_job="complete")
        latencies = gen.call("dispatch", samples=3, gap_s=0.05, timeout_s=30)["result"]
        assert len(latencies["latencies_ms"]) == 3
        cycles = gen.call("throughput", submitters=3, duration_s=0.3, warmup_s=0.0)["result"]
        assert cycles["failures"] == 0 and cycles["total_cycles"] > 0
        beats = gen.call("heartbeats", duration_s=0.2, concurrency=2, timeout_s=20)["result"]
        assert beats["done"] > 0 and set(beats["statuses"]) == {"200"}
        assert gen.call("status")["result"]["errors"] == {}
    finally:
        gen.close()
    # Every job it answered for is committed as completed, and the workers are free.
    jobs = 3 + cycles["total_cycles"]
    assert stored(server, "SELECT state, count(*) FROM jobs GROUP BY state") == [
        ("completed", jobs)
    ]
    assert stored(server, "SELECT count(*) FROM workers WHERE current_job_id IS NULL") == [(3,)]


@pytest.mark.e2e
def test_it_refuses_what_tunefleet_refuses(server: MinimalServer) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    assert call(server, "/api/queue/submit", {"config": {}}, {})[0] == 401
    code, body = call(server, "/api/queue/submit", {"config_name": "x"}, admin)
    assert code == 400 and "config" in body["detail"]
    made = call(server, "/api/admin/workers", {"name": "w"}, admin)[1]
    worker = {"X-Worker-Token": made["token"]}
    assert call(server, "/api/workers/register", {}, {"X-Worker-Token": "wt_nope"}) == (
        401,
        {"detail": "Invalid worker token"},
    )
    beat = {"worker_id": made["worker_id"], "status": "idle"}
    assert call(server, "/api/workers/heartbeat", beat, worker)[0] == 409  # not registered
    registered = call(server, "/api/workers/register", {"name": "w", "gpu_count": 1}, worker)
    assert registered[1]["worker_id"] == made["worker_id"]
    assert call(server, "/api/workers/heartbeat", beat, worker) == (200, {"success": True})
    wrong = {**beat, "worker_id": "w_other"}
    assert call(server, "/api/workers/heartbeat", wrong, worker)[1] == {
        "detail": "Worker ID mismatch"
    }
    # No stream open: the job waits, and a report about it is not this worker's to make.
    submitted = call(server, "/api/queue/submit", {"config": {}, "gpu_count": 1}, admin)[1]
    assert submitted["status"] == "pending" and submitted["queue_position"] == 1
    path = f"/api/workers/job/{submitted['job_id']}/status"
    assert call(server, path, {"status": "running"}, worker)[0] == 403
    assert call(server, "/api/workers/register", [], worker)[0] == 400
    assert call(server, "/api/workers/job/job_nope/status", {}, worker)[0] == 404
    assert stored(server, "SELECT state, worker_id FROM jobs") == [("pending", None)]
    # The heartbeat is written with the others of its second, not on its own.
    deadline = time.monotonic() + 10
    while stored(server, "SELECT last_heartbeat FROM workers") == [(None,)]:
        assert time.monotonic() < deadline, "the heartbeat was never written"
        time.sleep(0.1)


def next_job_submit(server: MinimalServer, worker_id: str, token: str) -> dict[str, Any]:
    """Open the worker's stream and read up to its first job_submit; then close it."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/api/workers/stream?worker_id={worker_id}",
        headers={"X-Worker-Token": token},
    )
    with urllib.request.urlopen(request, timeout=10) as stream:
        for raw in stream:
            line = raw.decode().strip()
            if line.startswith("data: ") and '"job_submit"' in line:
                return dict(json.loads(line[6:]))
    raise AssertionError("the stream ended before a job_submit")


@pytest.mark.e2e
def test_what_it_answered_survives_a_kill_and_a_lost_job_submit_is_requeued(
    server: MinimalServer,
) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    made = call(server, "/api/admin/workers", {"name": "w"}, admin)[1]
    worker_id, worker = made["worker_id"], {"X-Worker-Token": made["token"]}
    submitted = call(server, "/api/queue/submit", {"config": {"steps": 1}}, admin)[1]
    job_id = submitted["job_id"]
    assert submitted["status"] == "pending"

    # SIGKILL: only what was committed is left; the worker and the job were.
    server.kill()
    server.start(timeout_s=30)
    call(server, "/api/workers/register", {"name": "w"}, worker)
    event = next_job_submit(server, worker_id, made["token"])
    assert event["job_id"] == job_id and event["config"] == {"steps": 1}
    assert event["upload_token"] == "" and event["attempt"] == 1
    path = f"/api/workers/job/{job_id}/status"
    for bad in ({"status": ["running"]}, {"status": "sleeping"}, {}):
        assert call(server, path, bad, worker)[0] == 400, bad
    assert stored(server, "SELECT state, worker_id FROM jobs") == [("dispatched", worker_id)]

    # Registering again while holding it: told to resume it.
    held = call(server, "/api/workers/register", {"name": "w", "current_job_id": job_id}, worker)
    assert held[1]["resume_job"]["job_id"] == job_id and held[1]["abandon_job"] is None
    # Registering without it (the job_submit was lost): it goes back to the queue, and
    # the next stream gets it again.
    call(server, "/api/workers/register", {"name": "w"}, worker)
    assert stored(server, "SELECT state, worker_id FROM jobs") == [("pending", None)]
    assert next_job_submit(server, worker_id, made["token"])["job_id"] == job_id
    # Naming a job that is not its own: told to abandon it; the one it holds is requeued.
    other = call(server, "/api/workers/register", {"name": "w", "current_job_id": "j_x"}, worker)
    assert other[1]["abandon_job"] == "j_x" and other[1]["resume_job"] is None
    assert stored(server, "SELECT state, worker_id FROM jobs") == [("pending", None)]


# --- --records tunefleet: the rows tunefleet stores per job cycle ------------------------

CYCLE_TABLES = ("job", "job_attempt", "job_event", "audit_event", "upload_token")


@pytest.fixture
def rows_server(tmp_path: Path) -> Iterator[MinimalServer]:
    proc = MinimalServerWithRows(tmp_path / "server").start(timeout_s=30)
    try:
        yield proc
    finally:
        proc.stop()


def shape(conn: sqlite3.Connection, table: str) -> dict[str, Any]:
    """A table's columns, foreign keys and indexes (with their columns), as SQLite has them."""
    indexes = {
        name: (unique, [col[2] for col in conn.execute(f'PRAGMA index_info("{name}")')])
        for _, name, unique, *_ in conn.execute(f'PRAGMA index_list("{table}")')
    }
    return {
        "columns": [tuple(col[1:]) for col in conn.execute(f'PRAGMA table_info("{table}")')],
        "foreign keys": [
            tuple(fk[2:]) for fk in conn.execute(f'PRAGMA foreign_key_list("{table}")')
        ],
        "indexes": indexes,
    }


def test_its_tables_for_tunefleets_rows_are_tunefleets(tmp_path: Path) -> None:
    """Same columns, foreign keys and secondary indexes as tunefleet's migrated schema: an
    index left out would make the yardstick's rows cheaper than tunefleet's."""
    theirs = pw.SqliteDatabase(str(tmp_path / "tunefleet.db"))
    theirs.connect()
    migrate(theirs)
    ours = sqlite3.connect(tmp_path / "minimal.db")
    ours.executescript(TUNEFLEET_SCHEMA)
    for table in CYCLE_TABLES:
        assert shape(ours, table) == shape(theirs.connection(), table), table
    theirs.close()
    ours.close()


def verify_audit(server: MinimalServer) -> list[str]:
    """The audit table's chain checked by tunefleet's own verifier, and the audit file's
    lines (id and hash) matching the table's rows; the events' kinds, in order."""
    columns = "id, at, kind, actor, client_address, target, outcome, detail, prev_hash, hash"
    rows = [
        AuditEventRow(
            **{**dict(zip(columns.split(", "), row, strict=True)), "detail": json.loads(row[7])}
        )
        for row in stored(server, f"SELECT {columns} FROM audit_event ORDER BY id")
    ]
    check = check_rows(rows, 0, GENESIS_HASH)
    assert check.first_bad_id is None and check.checked == len(rows) > 0
    lines = (server.data_dir / "audit.jsonl").read_text().splitlines()
    written = [json.loads(line) for line in lines]
    assert [(line["id"], line["hash"], line["kind"]) for line in written] == [
        (row.id, row.hash, row.kind) for row in rows
    ]
    return [row.kind for row in rows]


@pytest.mark.e2e
def test_with_tunefleets_records_each_job_cycle_stores_tunefleets_rows(
    rows_server: MinimalServer, tmp_path: Path
) -> None:
    gen = LoadGenProcess(rows_server.port, rows_server.pid, tmp_path / "loadgen.log", pool=4)
    gen.start()
    try:
        gen.call("create_workers", count=2, timeout_s=20)
        gen.call("register", timeout_s=20)
        assert gen.call("open_streams", timeout_s=20)["result"]["streams"] == 2
        gen.call("set_mode", on_job="complete")
        assert (
            len(gen.call("dispatch", samples=3, gap_s=0.05, timeout_s=30)["result"]["latencies_ms"])
            == 3
        )
        cycles = gen.call("throughput", submitters=2, duration_s=0.3, warmup_s=0.0)["result"]
        assert cycles["failures"] == 0 and cycles["total_cycles"] > 0
        assert gen.call("status")["result"]["errors"] == {}
    finally:
        gen.close()
    jobs = 3 + cycles["total_cycles"]
    # Per job, what tunefleet stores: its row, one attempt, one upload credential, four
    # timeline rows and three audit events (submitted, dispatched, completed).
    assert stored(
        rows_server, "SELECT state, attempts, name, count(*) FROM job GROUP BY 1, 2, 3"
    ) == [("completed", 1, "bench", jobs)]
    assert stored(rows_server, "SELECT min(seq), max(seq) FROM job") == [(1, jobs)]
    assert stored(
        rows_server,
        "SELECT outcome, count(started_at), count(ended_at), count(DISTINCT job_id)"
        " FROM job_attempt GROUP BY outcome",
    ) == [("completed", jobs, jobs, jobs)]
    assert stored(rows_server, "SELECT count(*), count(DISTINCT job_id) FROM upload_token") == [
        (jobs, jobs)
    ]
    assert stored(rows_server, "SELECT kind, count(*) FROM job_event GROUP BY kind") == [
        ("completed", jobs), ("dispatched", jobs), ("started", jobs), ("submitted", jobs)
    ]  # fmt: skip
    kinds = verify_audit(rows_server)
    assert sorted(set(kinds)) == ["job.completed", "job.dispatched", "job.submitted"]
    assert len(kinds) == 3 * jobs
    # The worker's row is not written per job (tunefleet's is not either).
    assert stored(rows_server, "SELECT count(*) FROM workers WHERE current_job_id IS NULL") == [
        (2,)
    ]


@pytest.mark.e2e
def test_with_tunefleets_records_a_restart_keeps_the_chain_and_a_requeue_is_a_new_attempt(
    rows_server: MinimalServer,
) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    made = call(rows_server, "/api/admin/workers", {"name": "w"}, admin)[1]
    worker_id, worker = made["worker_id"], {"X-Worker-Token": made["token"]}
    body = {"config": {"steps": 1}, "name": "one"}
    job_id = call(rows_server, "/api/queue/submit", body, admin)[1]["job_id"]
    # Queued (no stream): the job row, its submitted timeline row and audit event.
    assert stored(rows_server, "SELECT state, attempts, worker_id, wait_reason FROM job") == [
        ("pending", 0, None, "no idle worker fits; waiting")
    ]
    call(rows_server, "/api/workers/register", {"name": "w"}, worker)
    first = next_job_submit(rows_server, worker_id, made["token"])
    assert (first["attempt"], first["upload_endpoint"]) == (1, "/api/artifacts")
    assert first["upload_token"].startswith("ut_")
    assert stored(rows_server, "SELECT token_hash FROM upload_token") == [
        (hashlib.sha256(first["upload_token"].encode()).hexdigest(),)
    ]

    # SIGKILL, then start again: which worker holds the job is read from the job table.
    rows_server.kill()
    rows_server.start(timeout_s=30)
    held = {"name": "w", "current_job_id": job_id}
    assert (
        call(rows_server, "/api/workers/register", held, worker)[1]["resume_job"]["job_id"]
        == job_id
    )
    # Registering without it: requeued, its attempt lost; the next dispatch is attempt 2.
    call(rows_server, "/api/workers/register", {"name": "w"}, worker)
    assert stored(rows_server, "SELECT state, worker_id FROM job") == [("pending", None)]
    second = next_job_submit(rows_server, worker_id, made["token"])
    assert second["attempt"] == 2 and second["upload_token"] != first["upload_token"]
    path = f"/api/workers/job/{job_id}/status"
    for status in ("running", "completed"):
        assert call(rows_server, path, {"status": status}, worker) == (200, {"success": True})

    assert stored(rows_server, "SELECT state, attempts, name, config FROM job") == [
        ("completed", 2, "one", '{"steps":1}')
    ]
    assert stored(rows_server, "SELECT number, outcome FROM job_attempt ORDER BY number") == [
        (1, "lost"), (2, "completed")
    ]  # fmt: skip
    assert stored(rows_server, "SELECT kind, attempt FROM job_event ORDER BY id") == [
        ("submitted", None), ("dispatched", 1), ("requeued", 1), ("dispatched", 2),
        ("started", 2), ("completed", 2),
    ]  # fmt: skip
    # One chain across the restart (its head read back at start), and one file.
    assert verify_audit(rows_server) == [
        "job.submitted", "job.dispatched", "job.requeued", "job.dispatched", "job.completed"
    ]  # fmt: skip


def test_it_refuses_records_it_does_not_know(tmp_path: Path) -> None:
    script = REPO_ROOT / "bench" / "minimal_server.py"
    args = ["--port", "1", "--db", str(tmp_path / "m.db"), "--records", "everything"]
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "invalid choice: 'everything'" in done.stderr
    assert not (tmp_path / "m.db").exists()
