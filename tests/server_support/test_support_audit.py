"""AuditLog: both copies of every event, secrets kept out, the file written off the loop."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tunefleet import audit as audit_module
from tunefleet.audit import AuditKind, AuditLog

TOKEN = "wt_Q1w2E3r4T5y6U7i8O9p0AaSsDdFfGgHhJjKkLlZz-_x"
NOW = 1_700_000_000.25


@dataclass(frozen=True)
class StoredEvent:
    id: int
    hash: str
    fields: dict[str, Any]


@dataclass
class FakeStore:
    """Stands in for Store.append_audit: same keyword signature, returns a row."""

    events: list[StoredEvent] = field(default_factory=list)
    fail_with: Exception | None = None

    async def append_audit(self, kind: str, **fields: Any) -> StoredEvent:
        await asyncio.sleep(0)  # a real store awaits its DB thread
        if self.fail_with is not None:
            raise self.fail_with
        event = StoredEvent(
            len(self.events) + 1, f"h{len(self.events) + 1}", {"kind": kind, **fields}
        )
        self.events.append(event)
        return event


class StillClock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
async def audit(store: FakeStore, tmp_path: Path) -> AsyncIterator[AuditLog]:
    log = AuditLog(store.append_audit, tmp_path / "data" / "audit.jsonl", StillClock())
    try:
        yield log
    finally:
        await log.close()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_kinds_are_exactly_the_documented_set() -> None:
    assert {k.value for k in AuditKind} == {
        "worker.register",
        "worker.register_failed",
        "worker.created",
        "worker.deleted",
        "worker.drained",
        "worker.health",
        "worker.resumed",
        "worker.token_rotated",
        "worker.disconnected",
        "worker.offline",
        "job.submitted",
        "job.dispatched",
        "job.status",
        "job.requeued",
        "job.cancelled",
        "job.failed",
        "job.completed",
        "auth.failed",
        "auth.failed_window",
        "api_token.created",
        "api_token.revoked",
        "artifact.uploaded",
        "artifact.downloaded",
        "artifacts.deleted",
        "user.created",
        "user.disabled",
        "user.enabled",
        "user.role_set",
        "user.password_set",
        "user.signed_in",
        "user.signed_out",
        "team.created",
        "team.member_added",
        "team.member_removed",
        "team.budget_set",
        "team.budget_cleared",
        "budget.warning",
        "queue.concurrency_set",
        "team.limits_set",
        "approval_rule.added",
        "approval_rule.deleted",
        "job.approved",
        "job.rejected",
        "webhook.created",
        "webhook.deleted",
        "webhook.enabled",
        "webhook.secret_rotated",
        "webhook.redelivered",
        "job.preempted",
        "team.quota_set",
        "team.quota_cleared",
        "queue.reclaim",
        "worker.quarantined",
        "worker.released",
    }


async def test_an_event_is_stored_and_written_as_a_json_line(
    audit: AuditLog, store: FakeStore
) -> None:
    stored = await audit.record(
        AuditKind.JOB_DISPATCHED,
        actor="scheduler",
        target="j_1",
        client_address="10.0.0.7",
        worker_id="w_1",
        attempt=1,
    )
    assert stored is store.events[0]
    assert store.events[0].fields == {
        "kind": "job.dispatched",
        "at": NOW,
        "actor": "scheduler",
        "client_address": "10.0.0.7",
        "target": "j_1",
        "outcome": "success",
        "detail": {"worker_id": "w_1", "attempt": 1},
    }
    (line,) = lines(audit.path)
    assert line == {
        "timestamp": "2023-11-14T22:13:20.250000Z",
        "at": NOW,
        "kind": "job.dispatched",
        "actor": "scheduler",
        "client_address": "10.0.0.7",
        "target": "j_1",
        "outcome": "success",
        "detail": {"worker_id": "w_1", "attempt": 1},
        "id": 1,
        "hash": "h1",
    }


async def test_lines_are_appended_in_order_to_an_existing_file(
    store: FakeStore, tmp_path: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text('{"kept": true}\n', encoding="utf-8")
    audit = AuditLog(store.append_audit, path, StillClock())
    await asyncio.gather(
        *(audit.record("job.status", actor=f"w_{i}", target=f"j_{i}") for i in range(40))
    )
    await audit.close()
    written = lines(path)
    assert written[0] == {"kept": True}
    assert [line["id"] for line in written[1:]] == list(range(1, 41))
    # The line and its stored twin describe the same event.
    by_id = {e.id: e for e in store.events}
    assert all(line["actor"] == by_id[line["id"]].fields["actor"] for line in written[1:])


async def test_each_line_is_on_disk_before_record_returns(audit: AuditLog) -> None:
    await audit.record("worker.created", actor="admin", target="w_1")
    assert len(lines(audit.path)) == 1
    await audit.record("worker.deleted", actor="admin", target="w_1")
    assert [line["kind"] for line in lines(audit.path)] == ["worker.created", "worker.deleted"]


async def test_the_file_is_written_off_the_event_loop(
    audit: AuditLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    real_write = AuditLog._write

    def spy(self: AuditLog, line: str) -> None:
        threads.append(threading.current_thread().name)
        real_write(self, line)

    monkeypatch.setattr(AuditLog, "_write", spy)
    await audit.record("auth.failed", actor=None, outcome="failure", reason="bad token")
    assert len(threads) == 1
    assert threads[0] != threading.current_thread().name
    assert threads[0].startswith("tunefleet-audit")


async def test_lines_recorded_together_reach_the_writer_together(
    audit: AuditLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches: list[int] = []
    real_write_lines = AuditLog._write_lines

    def spy(self: AuditLog, batch: list[str]) -> None:
        batches.append(len(batch))
        real_write_lines(self, batch)

    monkeypatch.setattr(AuditLog, "_write_lines", spy)
    await asyncio.gather(
        *(audit.record("job.status", actor=f"w_{i}", target=f"j_{i}") for i in range(20))
    )
    assert sum(batches) == 20
    assert len(batches) < 20  # one hand-off to the writer thread per batch, not per line
    assert [line["actor"] for line in lines(audit.path)] == [f"w_{i}" for i in range(20)]


async def test_a_batch_is_one_write_and_one_flush_of_whole_lines(
    audit: AuditLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[str] = []
    real_write = AuditLog._write

    def spy(self: AuditLog, text: str) -> None:
        writes.append(text)
        real_write(self, text)

    monkeypatch.setattr(AuditLog, "_write", spy)
    await asyncio.gather(
        *(audit.record("job.status", actor=f"w_{i}", target=f"j_{i}") for i in range(20))
    )
    assert len(writes) < 20
    assert sum(text.count("\n") + 1 for text in writes) == 20
    assert [line["actor"] for line in lines(audit.path)] == [f"w_{i}" for i in range(20)]


async def test_close_ends_the_writer_thread_after_the_last_line(
    store: FakeStore, tmp_path: Path
) -> None:
    audit = AuditLog(store.append_audit, tmp_path / "audit.jsonl", StillClock())
    await audit.record("worker.drained", actor="admin", target="w_1")
    writers = [t for t in threading.enumerate() if t.name == "tunefleet-audit"]
    assert writers and all(t.daemon for t in writers)  # never holds the process at exit
    mine = audit._writer
    assert mine is not None and mine.is_alive()
    await audit.close()
    assert not mine.is_alive()
    assert len(lines(tmp_path / "audit.jsonl")) == 1


def test_lines_queued_in_a_log_never_closed_are_written_at_exit(
    store: FakeStore, tmp_path: Path
) -> None:
    """The writer is a daemon thread; its finalizer (run at interpreter exit, or when the
    log is dropped) writes what is queued before the thread goes."""
    path = tmp_path / "audit.jsonl"

    async def record_without_closing() -> AuditLog:
        audit = AuditLog(store.append_audit, path, StillClock())
        await audit.record("worker.drained", actor="admin", target="w_1")
        # Handed to the writer, not awaited: the loop may be closed before it is written.
        pending = asyncio.ensure_future(audit.record("worker.resumed", actor="admin", target="w_1"))
        await asyncio.sleep(0)  # stored (the fake store answers at once), its line batched
        audit._flush()  # handed to the writer now (the loop would have done it next)
        assert not pending.done()
        return audit

    audit = asyncio.run(record_without_closing())
    writer = audit._writer
    assert writer is not None
    audit_module._stop_writer(audit._batches, writer)
    assert not writer.is_alive()
    assert [line["kind"] for line in lines(path)] == ["worker.drained", "worker.resumed"]


async def test_a_line_keeps_non_ascii_text_and_writes_other_values_as_text(
    audit: AuditLog,
) -> None:
    await audit.record(
        "worker.created", actor="admin", target="w_1", name="gpu-salle-é", where=Path("/srv/x")
    )
    (text,) = audit.path.read_text(encoding="utf-8").splitlines()
    assert '"name": "gpu-salle-é"' in text  # as written, not \u escaped
    assert json.loads(text)["detail"] == {"name": "gpu-salle-é", "where": "/srv/x"}
    assert text == json.dumps(json.loads(text), ensure_ascii=False)


async def test_a_cancelled_caller_leaves_the_others_lines_written(audit: AuditLog) -> None:
    first = asyncio.ensure_future(audit.record("job.status", actor="w_1", target="j_1"))
    second = asyncio.ensure_future(audit.record("job.status", actor="w_2", target="j_2"))
    for _ in range(3):  # both stored, both waiting on the same batch of lines
        await asyncio.sleep(0)
    first.cancel()
    await second
    await audit.close()
    assert [line["actor"] for line in lines(audit.path)] == ["w_1", "w_2"]


async def test_unknown_kind_is_refused_and_nothing_is_written(
    audit: AuditLog, store: FakeStore
) -> None:
    with pytest.raises(ValueError, match=r"unknown audit event kind 'job\.exploded'"):
        await audit.record("job.exploded", actor="x")
    assert store.events == []
    assert not audit.path.exists()


@pytest.mark.parametrize("key", ["token", "worker_token", "password", "client_secret"])
async def test_secret_named_detail_is_refused(audit: AuditLog, store: FakeStore, key: str) -> None:
    with pytest.raises(ValueError, match="secret-named detail"):
        await audit.record("worker.token_rotated", actor="admin", target="w_1", **{key: TOKEN})
    assert store.events == []
    assert not audit.path.exists()


async def test_token_hash_and_ids_are_fine(audit: AuditLog, store: FakeStore) -> None:
    await audit.record("api_token.created", actor="admin", token_hash="ab" * 32, token_id="t_1")
    assert store.events[0].fields["detail"] == {"token_hash": "ab" * 32, "token_id": "t_1"}


async def test_tokens_in_values_are_masked_in_both_copies(
    audit: AuditLog, store: FakeStore
) -> None:
    with capture_logs() as logs:
        await audit.record(
            "auth.failed",
            actor=f"bearer {TOKEN}",
            target=TOKEN,
            outcome="failure",
            reason=f"X-Worker-Token {TOKEN} is not known",
            labels={"note": [TOKEN], "password": "hunter2"},
        )
    text = audit.path.read_text(encoding="utf-8")
    stored = json.dumps(store.events[0].fields, ensure_ascii=False)
    for copy in (text, stored):
        assert TOKEN not in copy
        assert TOKEN[3:20] not in copy
        assert "hunter2" not in copy
        assert f"wt_…{TOKEN[-4:]}" in copy
    assert store.events[0].fields["detail"]["labels"]["password"] == "[redacted]"
    assert [e["event"] for e in logs] == ["audit detail contained a token; masked it"]


async def test_file_failure_is_logged_and_the_stored_record_returned(
    store: FakeStore, tmp_path: Path
) -> None:
    blocked = tmp_path / "audit.jsonl"
    blocked.mkdir()  # a directory where the file should be
    audit = AuditLog(store.append_audit, blocked, StillClock())
    with capture_logs() as logs:
        stored = await audit.record("worker.offline", actor="w_1", target="w_1")
    await audit.close()
    assert stored is store.events[0]
    assert [(e["event"], e["log_level"]) for e in logs] == [("audit line not written", "error")]


async def test_close_is_idempotent_and_refuses_later_records(
    store: FakeStore, tmp_path: Path
) -> None:
    audit = AuditLog(store.append_audit, tmp_path / "audit.jsonl", StillClock())
    await audit.record("worker.drained", actor="admin", target="w_1")
    await audit.close()
    await audit.close()
    with pytest.raises(RuntimeError, match="closed"):
        await audit.record("worker.resumed", actor="admin", target="w_1")
    assert len(lines(tmp_path / "audit.jsonl")) == 1


async def test_close_without_any_event_creates_no_file(store: FakeStore, tmp_path: Path) -> None:
    audit = AuditLog(store.append_audit, tmp_path / "audit.jsonl", StillClock())
    await audit.close()
    assert not (tmp_path / "audit.jsonl").exists()


async def test_with_the_real_store(tmp_path: Path) -> None:
    """The seam with storage: AuditLog takes Store.append_audit as it is."""
    database = pytest.importorskip("tunefleet.storage.database")
    store_module = pytest.importorskip("tunefleet.storage.store")
    db = await database.open_database(None, tmp_path)
    try:
        store = store_module.Store(db)
        audit = AuditLog(store.append_audit, tmp_path / "audit.jsonl", StillClock())
        row = await audit.record("worker.register", actor="w_1", target="w_1", state="idle")
        await audit.record("job.submitted", actor="api", target="j_1", reason=f"x {TOKEN}")
        await audit.close()
        assert row.kind == "worker.register"
        assert row.detail == {"state": "idle"}
        assert await store.verify_audit() == (True, None)
        written = lines(tmp_path / "audit.jsonl")
        rows = await store.list_audit()
        assert {r.hash for r in rows} == {line["hash"] for line in written}
        assert TOKEN not in json.dumps([r.detail for r in rows])
    finally:
        await db.close()


async def test_lines_of_committed_events_are_written_by_the_committing_thread(
    audit: AuditLog, store: FakeStore
) -> None:
    """stage_committed then write_staged (a write's after_commit and the database's
    on_commit, on its thread): the same lines as record's, the staged ones in one write,
    with no hand-off to the writer thread."""
    first = audit.entry(AuditKind.JOB_SUBMITTED, actor="api", target="j_1", config_name="c")
    second = audit.entry(AuditKind.JOB_DISPATCHED, actor="scheduler", target="j_1", attempt=1)
    rows = [await store.append_audit(e.kind, at=e.at, **e.fields) for e in (first, second)]
    writes: list[tuple[str, str]] = []
    real_write = AuditLog._write

    def spy(self: AuditLog, text: str) -> None:
        writes.append((threading.current_thread().name, text))
        real_write(self, text)

    def commit_two_writes() -> None:
        audit.stage_committed([(first, rows[0])])
        audit.stage_committed([(second, rows[1])])
        assert not audit.path.exists()  # staged, not written yet
        audit.write_staged()
        audit.write_staged()  # nothing staged: nothing written

    committing = threading.Thread(target=commit_two_writes, name="db")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AuditLog, "_write", spy)
        committing.start()
        await asyncio.to_thread(committing.join, 10)
    assert [name for name, _ in writes] == ["db"]  # one write, on the committing thread
    assert audit._writer is None  # the writer thread was never needed
    written = lines(audit.path)
    assert [(line["kind"], line["id"], line["hash"]) for line in written] == [
        ("job.submitted", 1, "h1"),
        ("job.dispatched", 2, "h2"),
    ]
    # Byte for byte what record's path writes for the same event and stored row.
    await audit.recorded(second, rows[1])
    assert lines(audit.path)[-1] == written[1]


async def test_a_committed_line_that_cannot_be_written_is_logged(
    store: FakeStore, tmp_path: Path
) -> None:
    blocked = tmp_path / "audit.jsonl"
    blocked.mkdir()
    audit = AuditLog(store.append_audit, blocked, StillClock())
    event = audit.entry(AuditKind.JOB_COMPLETED, actor="w_1", target="j_1")
    row = await store.append_audit(event.kind, at=event.at, **event.fields)
    with capture_logs() as logs:
        audit.stage_committed([(event, row)])
        audit.write_staged()
    await audit.close()
    assert [(e["event"], e["kinds"]) for e in logs] == [
        ("audit line not written", ["job.completed"])
    ]


async def test_a_line_committed_after_close_is_written_and_the_file_closed(
    store: FakeStore, tmp_path: Path
) -> None:
    audit = AuditLog(store.append_audit, tmp_path / "audit.jsonl", StillClock())
    event = audit.entry(AuditKind.JOB_COMPLETED, actor="w_1", target="j_1")
    row = await store.append_audit(event.kind, at=event.at, **event.fields)
    await audit.close()
    audit.stage_committed([(event, row)])
    audit.write_staged()
    assert [line["id"] for line in lines(tmp_path / "audit.jsonl")] == [1]
    assert audit._file is None


def test_a_line_is_what_json_dumps_makes_and_a_circular_detail_is_refused() -> None:
    """The line is encoded by the C encoder directly: the same text as json.dumps with the
    line's options (NaN allowed, other values as text), and a circular value refused
    each time, not only the first (a new markers dict per line)."""
    detail: dict[Any, Any] = {"n": float("nan"), "p": Path("/x"), "é": [1, (2, 3)], 3: None}
    fields = {"timestamp": "t", "at": 1.5, "kind": "job.status", "detail": detail, "id": 1}
    assert audit_module._encode_line(fields) == json.dumps(fields, default=str, ensure_ascii=False)
    loop: dict[str, Any] = {}
    loop["self"] = loop
    for _ in range(2):
        with pytest.raises(ValueError, match="Circular reference"):
            audit_module._encode_line({"detail": loop})
    assert audit_module._encode_line(fields) == json.dumps(fields, default=str, ensure_ascii=False)
