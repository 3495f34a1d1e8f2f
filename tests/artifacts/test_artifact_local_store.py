"""The embedded store for real on disk: atomic replace, streaming, disk full, clashes."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tunefleet.artifacts import local
from tunefleet.artifacts.backends import StoreSpecError, open_store
from tunefleet.artifacts.keys import check_key, manifest_checkpoint
from tunefleet.artifacts.local import LocalStore
from tunefleet.artifacts.store import CHUNK_BYTES, Checks, StoreFull
from tunefleet.errors import BadRequest, Conflict


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def tmp_files(store: LocalStore) -> list[Path]:
    folder = store.root / ".tmp"
    return list(folder.iterdir()) if folder.exists() else []


async def test_a_large_stream_is_stored_whole_with_its_sha256(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "artifacts")
    block = bytes(range(256)) * 4096  # 1 MiB
    parts = [block] * (2 * CHUNK_BYTES // len(block) + 3)
    obj = await store.put("j_1", "out/model.bin", chunks(*parts), Checks())
    data = b"".join(parts)
    assert (obj.size, obj.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert (tmp_path / "artifacts/jobs/j_1/out/model.bin").read_bytes() == data
    assert tmp_files(store) == []
    assert [o.key for o in await store.list_objects("j_1")] == ["out/model.bin"]


async def test_a_full_disk_refuses_the_upload_and_keeps_what_was_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(tmp_path / "artifacts")
    await store.put("j_1", "model.bin", chunks(b"old"), Checks())
    real_write = local._Sink.write

    def full(self: local._Sink, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(local._Sink, "write", full)
    with pytest.raises(StoreFull) as caught:
        await store.put("j_1", "model.bin", chunks(b"new" * 10), Checks())
    assert caught.value.status == 507
    assert "out of disk space" in str(caught.value) and "nothing already stored" in str(
        caught.value
    )
    monkeypatch.setattr(local._Sink, "write", real_write)
    assert (tmp_path / "artifacts/jobs/j_1/model.bin").read_bytes() == b"old"
    assert tmp_files(store) == []


async def test_a_key_that_clashes_with_a_folder_is_a_conflict(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "artifacts")
    await store.put("j_1", "a/b.bin", chunks(b"x"), Checks())
    with pytest.raises(Conflict):
        await store.put("j_1", "a", chunks(b"y"), Checks())
    assert tmp_files(store) == []


async def test_a_failing_body_leaves_no_temporary_file(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "artifacts")

    async def broken() -> AsyncIterator[bytes]:
        yield b"x" * (CHUNK_BYTES + 1)
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        await store.put("j_1", "m.bin", broken(), Checks())
    assert tmp_files(store) == []
    assert not (tmp_path / "artifacts/jobs/j_1/m.bin").exists()


def leftover(path: Path, size: int, age_s: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    if age_s:
        then = path.stat().st_mtime - age_s
        os.utime(path, (then, then))
    return path


async def test_the_sweep_removes_only_what_an_earlier_process_left(tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    crashed = leftover(root / ".tmp/crashed", 1000, age_s=60)
    crashed_part = leftover(root / ".multipart/open1/00002.abc.tmp", 300, age_s=60)
    stored_part = leftover(root / ".multipart/open1/00001", 500, age_s=60)
    orphan = leftover(root / ".multipart/nobody/00001", 200, age_s=60)
    os.utime(orphan.parent, (orphan.stat().st_mtime, orphan.stat().st_mtime))
    store = LocalStore(root)
    await asyncio.sleep(0.05)  # what follows is this process's own
    live = leftover(root / ".tmp/live-upload", 7)
    live_part = leftover(root / ".multipart/open1/00003.def.tmp", 9)

    assert await store.sweep_leftovers({"open1"}) == (3, 1500)
    assert not crashed.exists() and not crashed_part.exists() and not orphan.parent.exists()
    assert stored_part.exists(), "a stored part of an open upload is kept"
    assert live.exists() and live_part.exists(), "a live upload's files are kept"
    assert await store.sweep_leftovers({"open1"}) == (0, 0)


async def test_a_part_folder_being_started_now_is_kept(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "artifacts")
    await asyncio.sleep(0.05)
    await store.start_multipart("j_1", "big.bin", "fresh")  # its record comes next
    assert await store.sweep_leftovers(set()) == (0, 0)
    assert (tmp_path / "artifacts/.multipart/fresh").is_dir()


async def test_delete_prefix_removes_one_checkpoint_or_the_whole_job(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "artifacts")
    for key in ("checkpoint-1/a", "checkpoint-2/a", "model.bin"):
        await store.put("j_1", key, chunks(b"x"), Checks())
    await store.delete_prefix("j_1", "checkpoint-1/")
    assert [o.key for o in await store.list_objects("j_1")] == ["checkpoint-2/a", "model.bin"]
    await store.delete_prefix("j_1")
    assert await store.list_objects("j_1") == []


@pytest.mark.parametrize(
    "key",
    ["", "/etc/passwd", "a/../b", "..", "a//b", "./a", "a\\b", "a\x00b", "é" * 513],
)
def test_unsafe_keys_are_refused(key: str) -> None:
    with pytest.raises(BadRequest):
        check_key(key)


def test_safe_keys_and_manifests() -> None:
    assert (
        check_key("checkpoint-200/unet/model.safetensors")
        == "checkpoint-200/unet/model.safetensors"
    )
    assert check_key("x" * 1024) == "x" * 1024
    assert manifest_checkpoint("checkpoint-200/.tunefleet-manifest.json") == ("checkpoint-200", 200)
    assert manifest_checkpoint("checkpoint-200/model.bin") is None
    assert manifest_checkpoint("sub/checkpoint-200/.tunefleet-manifest.json") is None


def test_checks_read_the_s3_integrity_headers() -> None:
    digest = hashlib.sha256(b"x").digest()
    import base64

    checks = Checks.from_headers({"x-amz-checksum-sha256": base64.b64encode(digest).decode()})
    assert checks.sha256 == digest.hex()
    assert Checks.from_headers({"x-amz-content-sha256": "UNSIGNED-PAYLOAD"}).sha256 is None
    with pytest.raises(BadRequest):
        Checks.from_headers({"x-amz-checksum-sha256": "not base64!"})


def test_store_specs(tmp_path: Path) -> None:
    assert isinstance(open_store(None, tmp_path), LocalStore)
    assert open_store(f"file://{tmp_path}/x", tmp_path).root == tmp_path / "x"  # type: ignore[attr-defined]
    with pytest.raises(StoreSpecError, match="not supported"):
        open_store("gs://bucket", tmp_path)
    with pytest.raises(StoreSpecError, match="needs a bucket"):
        open_store("s3://", tmp_path)
