"""The embedded artifact store: files under the data directory (nothing else to install).

Every object is written to a temporary file in the same filesystem, fsynced, then renamed
into place, so a reader (or a crash) sees the old object or the whole new one, never half.
Bytes are read from the request on the event loop and written, hashed and fsynced on a
worker thread, one chunk in flight at a time: memory stays flat whatever the size, and
the loop stays free for the fleet.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from tunefleet.artifacts.store import (
    CHUNK_BYTES,
    ByteSource,
    Checks,
    ListedObject,
    PartInfo,
    StoredObject,
    StoreFull,
    checksum_mismatch,
    is_disk_full,
)
from tunefleet.errors import BadRequest, Conflict, NotFound


class _Sink:
    """One temporary file being filled on a worker thread, hashed as it goes."""

    def __init__(self, path: Path, want_md5: bool) -> None:
        self.path = path
        self.size = 0
        self.sha256 = hashlib.sha256()
        self.md5 = hashlib.md5(usedforsecurity=False) if want_md5 else None
        self.file: BinaryIO | None = None

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "wb")  # noqa: SIM115 - closed in finish/discard

    def hash(self, data: bytes | bytearray) -> None:
        self.sha256.update(data)
        if self.md5 is not None:
            self.md5.update(data)

    def store(self, data: bytes | bytearray) -> None:
        assert self.file is not None
        self.file.write(data)
        self.size += len(data)

    def write(self, data: bytes | bytearray) -> None:
        self.hash(data)
        self.store(data)

    def finish(self) -> None:
        assert self.file is not None
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        self.file = None

    def discard(self) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.close()
            self.file = None
        with contextlib.suppress(OSError):
            self.path.unlink()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStore:
    presigns = False

    def __init__(self, root: Path) -> None:
        self.root = root
        self.describe = f"the data directory ({root})"
        self._tmp = root / ".tmp"
        self._parts = root / ".multipart"
        # What is older than this was left by an earlier process (no live upload's).
        self._opened_at = time.time()

    # --- paths ----------------------------------------------------------------------------

    def _job_dir(self, job_id: str) -> Path:
        return self.root / "jobs" / job_id

    def _path(self, job_id: str, key: str) -> Path:
        # Keys are checked (artifacts.keys) before they reach a store; this is the backstop.
        path = self._job_dir(job_id) / key
        if ".." in Path(key).parts or Path(key).is_absolute():
            raise BadRequest("artifact key leaves the job's prefix")
        return path

    def local_path(self, job_id: str, key: str) -> Path | None:
        return self._path(job_id, key)

    def presign_get(self, job_id: str, key: str) -> str:
        raise NotImplementedError("the embedded store serves bytes itself")

    def presign_put(self, job_id: str, key: str, checks: Checks) -> str:
        raise NotImplementedError("the embedded store receives bytes itself")

    def presign_part(self, job_id: str, key: str, backend_id: str | None, number: int) -> str:
        raise NotImplementedError("the embedded store receives bytes itself")

    # --- whole objects --------------------------------------------------------------------

    async def put(self, job_id: str, key: str, body: ByteSource, checks: Checks) -> StoredObject:
        dest = self._path(job_id, key)
        sink = await self._fill(self._tmp / uuid.uuid4().hex, body, checks)
        await self._run(self._place, sink, dest)
        return StoredObject(sink.size, sink.sha256.hexdigest())

    async def put_bytes(self, job_id: str, key: str, data: bytes) -> StoredObject:
        async def one() -> ByteSource:
            yield data

        return await self.put(job_id, key, one(), Checks())

    async def read_bytes(self, job_id: str, key: str, limit: int) -> bytes:
        path = self._path(job_id, key)

        def read() -> bytes:
            with open(path, "rb") as file:
                return file.read(limit)

        try:
            return await asyncio.to_thread(read)
        except FileNotFoundError:
            raise NotFound(f"artifact not found: {key}") from None

    async def list_objects(self, job_id: str, prefix: str = "") -> list[ListedObject]:
        base = self._job_dir(job_id)

        def walk() -> list[ListedObject]:
            found = []
            for dirpath, _dirs, files in os.walk(base):
                for name in files:
                    path = Path(dirpath) / name
                    key = path.relative_to(base).as_posix()
                    if key.startswith(prefix):
                        found.append(ListedObject(key, path.stat().st_size))
            return sorted(found, key=lambda o: o.key)

        return await asyncio.to_thread(walk)

    async def delete_prefix(self, job_id: str, prefix: str = "") -> None:
        base = self._job_dir(job_id)
        target = base / prefix.rstrip("/") if prefix else base

        def remove() -> None:
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            elif prefix and not prefix.endswith("/"):
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()

        await asyncio.to_thread(remove)

    # --- multipart ------------------------------------------------------------------------

    async def start_multipart(self, job_id: str, key: str, upload_id: str) -> str | None:
        await self._run((self._parts / upload_id).mkdir, parents=True, exist_ok=True)
        return None

    async def put_part(
        self, upload_id: str, number: int, body: ByteSource, checks: Checks
    ) -> PartInfo:
        folder = self._parts / upload_id
        if not folder.is_dir():
            raise NotFound(f"multipart upload {upload_id} is not open; start a new one")
        sink = await self._fill(folder / f"{number:05d}.{uuid.uuid4().hex}.tmp", body, checks)
        await self._run(os.replace, sink.path, folder / f"{number:05d}")
        return PartInfo(number, sink.sha256.hexdigest(), sink.size)

    async def list_parts(
        self, job_id: str, key: str, upload_id: str, backend_id: str | None
    ) -> list[PartInfo]:
        folder = self._parts / upload_id

        def scan() -> list[PartInfo]:
            parts = []
            for path in sorted(folder.glob("[0-9][0-9][0-9][0-9][0-9]")):
                digest = hashlib.sha256()
                with open(path, "rb") as file:
                    while block := file.read(CHUNK_BYTES):
                        digest.update(block)
                parts.append(PartInfo(int(path.name), digest.hexdigest(), path.stat().st_size))
            return parts

        return await asyncio.to_thread(scan)

    async def parts_on_disk(self, upload_id: str) -> int:
        folder = self._parts / upload_id

        def total() -> int:
            return sum(path.stat().st_size for path in folder.glob("[0-9][0-9][0-9][0-9][0-9]"))

        return await asyncio.to_thread(total)

    async def complete_multipart(
        self,
        job_id: str,
        key: str,
        upload_id: str,
        backend_id: str | None,
        parts: list[tuple[int, str]],
    ) -> StoredObject:
        folder = self._parts / upload_id
        dest = self._path(job_id, key)
        sink = _Sink(self._tmp / uuid.uuid4().hex, want_md5=False)

        def assemble() -> None:
            sink.open()
            try:
                for number, etag in parts:
                    path = folder / f"{number:05d}"
                    if not path.is_file():
                        raise BadRequest(f"part {number} was never uploaded; upload it, then retry")
                    digest = hashlib.sha256()
                    with open(path, "rb") as file:
                        while block := file.read(CHUNK_BYTES):
                            digest.update(block)
                            sink.write(block)
                    if digest.hexdigest() != etag.strip('"'):
                        raise BadRequest(
                            f"part {number}'s etag does not match the stored part; "
                            "list the parts (GET ?uploadId=) and send their etags"
                        )
                sink.finish()
            except BaseException:
                sink.discard()
                raise
            self._place(sink, dest)
            shutil.rmtree(folder, ignore_errors=True)

        await self._run(assemble)
        return StoredObject(sink.size, sink.sha256.hexdigest())

    async def abort_multipart(
        self, job_id: str, key: str, upload_id: str, backend_id: str | None
    ) -> None:
        await asyncio.to_thread(shutil.rmtree, self._parts / upload_id, True)

    # --- after a crash ---------------------------------------------------------------------

    async def sweep_leftovers(self, open_uploads: set[str]) -> tuple[int, int]:
        return await asyncio.to_thread(self._sweep, open_uploads)

    def _sweep(self, open_uploads: set[str]) -> tuple[int, int]:
        files = freed = 0

        def remove(path: Path) -> None:
            nonlocal files, freed
            with contextlib.suppress(OSError):
                info = path.stat()
                if info.st_mtime < self._opened_at:
                    path.unlink()
                    files += 1
                    freed += info.st_size

        for path in _files_in(self._tmp):
            remove(path)  # whole objects a crash stopped before their rename
        for folder in _folders_in(self._parts):
            if folder.name in open_uploads:
                for path in folder.glob("*.tmp"):
                    remove(path)  # a part a crash stopped before its rename
                continue
            with contextlib.suppress(OSError):
                if folder.stat().st_mtime >= self._opened_at:
                    continue  # being started right now (its record comes next)
                for path in _files_in(folder):
                    remove(path)  # an upload with no record: nothing can complete it
                folder.rmdir()  # only once empty: a newer file keeps it
        return files, freed

    # --- the write path -------------------------------------------------------------------

    async def _fill(self, path: Path, body: ByteSource, checks: Checks) -> _Sink:
        """Stream `body` into a new temporary file: read on the loop, write on a thread,
        with the next chunk read while the previous one is written."""
        sink = _Sink(path, want_md5=checks.md5_b64 is not None)
        writing: asyncio.Future[Any] | None = None
        try:
            await self._run(sink.open)
            buffer = bytearray()
            async for chunk in body:
                buffer += chunk
                if len(buffer) >= CHUNK_BYTES:
                    if writing is not None:
                        await writing
                    # Hashing and writing both release the GIL: on two threads at once
                    # a chunk costs the slower of the two, not their sum.
                    writing = asyncio.gather(
                        self._run(sink.hash, buffer), self._run(sink.store, buffer)
                    )
                    buffer = bytearray()
            if writing is not None:
                await writing
            if buffer:
                await self._run(sink.write, buffer)
            await self._run(sink.finish)
            _verify(sink, checks)
        except BaseException:
            # Let a write in flight end before the file goes (never two threads on it).
            if writing is not None and not writing.done():
                with contextlib.suppress(BaseException):
                    await asyncio.shield(writing)
            await asyncio.shield(asyncio.to_thread(sink.discard))
            raise
        return sink

    def _place(self, sink: _Sink, dest: Path) -> None:
        """Rename the finished temporary file over `dest` (thread side)."""
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(sink.path, dest)
            _fsync_dir(dest.parent)
        except (NotADirectoryError, IsADirectoryError, FileExistsError):
            sink.discard()
            raise Conflict(
                "the key clashes with a stored file or folder of the same name; use a different key"
            ) from None
        except BaseException:
            sink.discard()
            raise

    @staticmethod
    async def _run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except OSError as error:
            if is_disk_full(error):
                raise StoreFull(
                    "the orchestrator's artifact store is out of disk space; nothing already "
                    "stored was lost: free space (or delete old jobs' artifacts) and retry"
                ) from None
            raise


def _files_in(folder: Path) -> list[Path]:
    with contextlib.suppress(OSError):
        return [p for p in folder.iterdir() if p.is_file()]
    return []


def _folders_in(folder: Path) -> list[Path]:
    with contextlib.suppress(OSError):
        return [p for p in folder.iterdir() if p.is_dir()]
    return []


def _verify(sink: _Sink, checks: Checks) -> None:
    if checks.sha256 is not None:
        got = sink.sha256.hexdigest()
        if got != checks.sha256:
            raise checksum_mismatch("SHA-256", got, checks.sha256)
    if checks.md5_b64 is not None and sink.md5 is not None:
        got = base64.b64encode(sink.md5.digest()).decode()
        if got != checks.md5_b64:
            raise checksum_mismatch("Content-MD5", got, checks.md5_b64)
