"""A real orchestrator (in-process) whose data directory is a small tmpfs, filled for
real (issue 23, finding 2): below --min-free-disk new logs, artifacts and jobs get 507;
reads, downloads, heartbeats and status reports go on; the audit chain stays whole with
no event in audit.jsonl alone; and bulk writes resume by themselves once space returns.
Skipped, with the reason, where a tmpfs cannot be mounted."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.small_disk import fill, free_bytes, small_disk
from tests.server.conftest import Server, ServerMaker
from tests.server.protocol import WorkerClient, eventually
from tests.server.test_api_artifacts import Uploader, dispatched
from tunefleet.http import keys
from tunefleet.limits import FreeDiskFloor, Limits, MiB

FLOOR = "4MiB"
_JOB = {"target": "worker", "config": {"model_type": "lora"}}


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "disk", 24) as mounted:
        yield mounted


async def _on_disk(make_server: ServerMaker, disk: Path, floor: str) -> Server:
    limits = Limits(min_free_disk=FreeDiskFloor.parse(floor))
    return await make_server(data_dir=disk / "data", limits=limits)


async def _logs_status(worker: WorkerClient, job_id: str, seq: int) -> int:
    return (await worker.send_logs(job_id, [f"line {seq}"], first_seq=seq)).status


def _audit_lines(server: Server) -> list[dict[str, Any]]:
    text = (server.data_dir / "audit.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


async def test_below_the_floor_bulk_writes_get_507_and_the_rest_goes_on(
    make_server: ServerMaker, disk: Path
) -> None:
    server = await _on_disk(make_server, disk, FLOOR)
    worker = await server.connected_worker()
    event = await dispatched(server, worker)
    job_id = event["job_id"]
    uploader = Uploader(server, event)
    kept = b"weights" * 1000
    await uploader.stored("model.bin", kept)
    assert await _logs_status(worker, job_id, 0) == 200

    filler = fill(disk, leave_bytes=2 * MiB)
    seq = iter(range(1, 1000))

    async def refused() -> bool:  # the floor is read at most once a second
        return await _logs_status(worker, job_id, next(seq)) == 507

    await eventually(refused, "log posts to be refused below the floor")
    resp = await worker.send_logs(job_id, ["more"], first_seq=2000)
    detail = (await resp.json())["detail"]
    assert resp.status == 507
    assert "log lines" in detail and "--min-free-disk" in detail and "free space" in detail
    submit = await server.post("/api/queue/submit", _JOB)
    assert submit.status == 507 and "a new job" in (await submit.json())["detail"]
    put = await uploader.put("more.bin", b"x" * 4096)
    assert put.status == 507 and "artifact bytes" in (await put.json())["detail"]
    start = await server.client.post(
        uploader.url("big.bin") + "?uploads", headers=uploader.headers()
    )
    assert start.status == 507

    # Reads, downloads, heartbeats and status reports are not bulk writes.
    assert (await worker.heartbeat(status="busy", current_job_id=job_id)).status == 200
    assert (await worker.report(job_id, "running", progress={"step": 3})).status == 200
    assert (await server.get("/api/queue")).status == 200
    logs = await server.ok("GET", f"/api/queue/{job_id}/logs")
    assert [line["line"] for line in logs["lines"]][:1] == ["line 0"]
    download = await server.get(f"/api/queue/{job_id}/artifacts/model.bin")
    assert download.status == 200 and await download.read() == kept

    assert (await server.ok("GET", "/api/audit/verify"))["ok"] is True
    downloads = await server.audit(kind="artifact.downloaded")
    assert len(downloads) == 1  # the download's event is in the chain

    filler.unlink()
    await eventually(lambda: _accepted(worker, job_id, next(seq)), "log posts to be taken again")
    assert (await server.post("/api/queue/submit", _JOB)).status == 200
    assert (await uploader.put("more.bin", b"x" * 4096)).status == 200
    assert (await server.ok("GET", "/api/audit/verify"))["ok"] is True
    assert all("id" in line and "stored" not in line for line in _audit_lines(server))


async def _accepted(worker: WorkerClient, job_id: str, seq: int) -> bool:
    return await _logs_status(worker, job_id, seq) == 200


async def test_a_truly_full_disk_answers_507_never_500_and_loses_no_audit_event(
    make_server: ServerMaker, disk: Path
) -> None:
    """No floor (0): the disk fills to the last byte. Writes fail with 507 (never 500,
    never "cannot rollback"), a stored artifact is still downloaded, and once space
    returns every audit event is in the chain, none in the file alone."""
    server = await _on_disk(make_server, disk, "0")
    worker = await server.connected_worker()
    event = await dispatched(server, worker)
    job_id = event["job_id"]
    uploader = Uploader(server, event)
    kept = b"weights" * 1000
    await uploader.stored("model.bin", kept)

    filler = fill(disk)
    statuses = set()
    for n in range(200):  # until SQLite has used the pages it had in hand
        resp = await worker.send_logs(job_id, ["y" * 4000] * 20, first_seq=20 * n)
        statuses.add(resp.status)
        if resp.status == 507:
            assert "free space" in (await resp.json())["detail"]
            break
    assert 507 in statuses and 500 not in statuses
    for _ in range(3):
        download = await server.get(f"/api/queue/{job_id}/artifacts/model.bin")
        assert download.status == 200 and await download.read() == kept

    filler.unlink()
    audit = server.app[keys.AUDIT]
    assert await audit.store_held()
    assert (await server.ok("GET", "/api/audit/verify"))["ok"] is True
    assert len(await server.audit(kind="artifact.downloaded")) == 3
    assert (await worker.send_logs(job_id, ["after"], first_seq=90_000)).status == 200
    await server.settle()
    assert all("id" in line and "stored" not in line for line in _audit_lines(server))


async def test_a_log_flood_stops_at_the_floor_though_the_database_lands_its_wal_later(
    make_server: ServerMaker, tmp_path: Path
) -> None:
    """bench abuse g at small scale: batches of nearly 1 MiB, as fast as they are
    answered. SQLite reuses its write-ahead log, so free space stays put until a
    checkpoint copies up to 16 MiB into the database at once, and a second's batches
    come before the disk is asked again. The guard counts the WAL as owed and the bytes
    it let through: the flood is refused by the floor (not by a full disk) and once the
    WAL is copied in the floor is still free, less about a batch."""
    floor = 12 * MiB
    with small_disk(tmp_path / "disk", 56) as disk:
        server = await _on_disk(make_server, disk, f"{floor}")
        worker = await server.connected_worker()
        job_id = (await dispatched(server, worker))["job_id"]
        lines = ["z" * 7000] * 120  # 0.8 MiB of text
        batch = len(lines) * 7000
        resp = None
        for n in range(80):  # 64 MiB: more than the disk holds
            resp = await worker.send_logs(job_id, lines, first_seq=len(lines) * n)
            if resp.status != 200:
                break
        assert resp is not None and resp.status == 507
        detail = (await resp.json())["detail"]
        assert "not enough free disk to store log lines" in detail, detail
        assert "owed to the database log" in detail, detail
        # What the WAL owes, landed now: a second connection copies it into the database.
        with contextlib.closing(sqlite3.connect(server.data_dir / "tunefleet.db")) as other:
            other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        assert free_bytes(disk) >= floor - batch, f"{free_bytes(disk) / MiB:.1f} MiB free"
        assert (await worker.heartbeat(status="busy", current_job_id=job_id)).status == 200


async def test_an_upload_that_cannot_fit_is_refused_before_its_first_byte(
    make_server: ServerMaker, tmp_path: Path
) -> None:
    """A PUT whose Content-Length is more than the room above the floor, and a multipart
    upload whose parts would be copied into an object that cannot fit: 507 at once,
    saying what is needed, and the disk keeps its floor (before: the PUT streamed down
    to the floor, the assembly wrote until the disk was full)."""
    floor = 4 * MiB
    with small_disk(tmp_path / "disk", 32) as disk:
        server = await _on_disk(make_server, disk, f"{floor}")
        worker = await server.connected_worker()
        uploader = Uploader(server, await dispatched(server, worker))
        free_before = free_bytes(disk)
        too_big = await uploader.put("huge.bin", b"x" * (free_before - floor + MiB))
        detail = (await too_big.json())["detail"]
        assert too_big.status == 507 and "needed" in detail and "artifact bytes" in detail
        assert free_bytes(disk) >= free_before - MiB  # nothing of it was kept

        url = uploader.url("big/model.bin")
        started = await server.client.post(url + "?uploads", headers=uploader.headers())
        upload_id = (await started.json())["upload_id"]
        etags = []
        for number in (1, 2):
            part = await server.client.put(
                f"{url}?partNumber={number}&uploadId={upload_id}",
                data=bytes([number]) * (6 * MiB),
                headers=uploader.headers(),
            )
            assert part.status == 200, await part.text()
            etags.append((await part.json())["etag"])
        filler = fill(disk, leave_bytes=floor + 8 * MiB)  # 12 MiB to copy, 8 MiB of room
        body = {"parts": [{"part_number": n, "etag": e} for n, e in enumerate(etags, 1)]}
        done = await server.client.post(
            f"{url}?uploadId={upload_id}", json=body, headers=uploader.headers()
        )
        detail = (await done.json())["detail"]
        assert done.status == 507 and "12.0 MiB needed" in detail, detail
        assert free_bytes(disk) >= floor
        filler.unlink()  # room again: the same parts complete
        done = await server.client.post(
            f"{url}?uploadId={upload_id}", json=body, headers=uploader.headers()
        )
        assert done.status == 200, await done.text()
