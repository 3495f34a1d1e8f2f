"""What an artifact store does, whichever holds the bytes (data directory or bucket).

Objects live at ``jobs/{job_id}/{key}``. The orchestrator's records (storage.store_artifacts)
say which objects are complete; a store only moves bytes. A store that `presigns` hands
workers and users URLs that reach the bucket directly, so those bytes never pass through
the orchestrator's event loop.
"""

from __future__ import annotations

import base64
import binascii
import errno
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tunefleet.errors import BadRequest, TunefleetError

ByteSource = AsyncIterator[bytes]
# Large enough that a 2 GiB upload is a few hundred writes, small enough that two in
# flight stay far below the memory target.
CHUNK_BYTES = 8 * 1024 * 1024
# What multipart uploads are advised to use (and the bound on a part sent through us).
PART_BYTES = 64 * 1024 * 1024
MAX_PARTS = 10_000
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


class StoreFull(TunefleetError):
    """The disk (or quota) under the store is full; nothing stored was touched."""

    status = 507


@dataclass(frozen=True, slots=True)
class StoredObject:
    size: int
    sha256: str | None


@dataclass(frozen=True, slots=True)
class ListedObject:
    key: str  # relative to the job
    size: int


@dataclass(frozen=True, slots=True)
class PartInfo:
    number: int
    etag: str
    size: int


@dataclass(frozen=True, slots=True)
class Checks:
    """Integrity the sender asked for: the body's SHA-256 (hex) and/or MD5 (base64)."""

    sha256: str | None = None
    md5_b64: str | None = None

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> Checks:
        sha256 = None
        amz = headers.get("x-amz-checksum-sha256")
        if amz:
            try:
                digest = base64.b64decode(amz, validate=True)
            except (binascii.Error, ValueError):
                digest = b""
            if len(digest) != 32:
                raise BadRequest("x-amz-checksum-sha256 must be the base64 of a SHA-256 digest")
            sha256 = digest.hex()
        content = headers.get("x-amz-content-sha256", "")
        if _HEX64.fullmatch(content):  # not "UNSIGNED-PAYLOAD" and the like
            if sha256 is not None and sha256 != content.lower():
                raise BadRequest("x-amz-checksum-sha256 and x-amz-content-sha256 disagree")
            sha256 = content.lower()
        return cls(sha256=sha256, md5_b64=headers.get("Content-MD5") or None)

    @property
    def sha256_b64(self) -> str | None:
        return base64.b64encode(bytes.fromhex(self.sha256)).decode() if self.sha256 else None


def checksum_mismatch(what: str, got: str, want: str) -> BadRequest:
    return BadRequest(
        f"{what} mismatch: the body's is {got} but the header says {want}; nothing was "
        "stored, upload it again"
    )


def is_disk_full(error: OSError) -> bool:
    return error.errno in (errno.ENOSPC, errno.EDQUOT)


# How long a presigned URL works: long enough for a multi-GB part on a slow link, short
# enough that a leaked URL dies soon.
PRESIGN_TTL_S = 3600


class ArtifactStore(Protocol):
    presigns: bool
    describe: str  # where the bytes go, for the startup banner and docs

    async def put(self, job_id: str, key: str, body: ByteSource, checks: Checks) -> StoredObject:
        """Store a whole object from a stream; durable when this returns."""
        ...

    async def put_bytes(self, job_id: str, key: str, data: bytes) -> StoredObject: ...

    async def read_bytes(self, job_id: str, key: str, limit: int) -> bytes: ...

    def local_path(self, job_id: str, key: str) -> Path | None:
        """The file holding an object, when the store is a directory (served by sendfile)."""
        ...

    def presign_get(self, job_id: str, key: str) -> str: ...

    def presign_put(self, job_id: str, key: str, checks: Checks) -> str: ...

    async def list_objects(self, job_id: str, prefix: str = "") -> list[ListedObject]: ...

    async def delete_prefix(self, job_id: str, prefix: str = "") -> None:
        """Delete the job's objects under `prefix` ('' = all of them)."""
        ...

    async def start_multipart(self, job_id: str, key: str, upload_id: str) -> str | None:
        """Begin a multipart upload; returns the bucket's own id for it, if any."""
        ...

    async def put_part(
        self, upload_id: str, number: int, body: ByteSource, checks: Checks
    ) -> PartInfo: ...

    def presign_part(self, job_id: str, key: str, backend_id: str | None, number: int) -> str: ...

    async def list_parts(
        self, job_id: str, key: str, upload_id: str, backend_id: str | None
    ) -> list[PartInfo]: ...

    async def parts_on_disk(self, upload_id: str) -> int:
        """Bytes of an upload's parts on the orchestrator's own disk (what assembling
        them copies into the object first); 0 for a store that keeps none there."""
        ...

    async def complete_multipart(
        self,
        job_id: str,
        key: str,
        upload_id: str,
        backend_id: str | None,
        parts: list[tuple[int, str]],
    ) -> StoredObject: ...

    async def abort_multipart(
        self, job_id: str, key: str, upload_id: str, backend_id: str | None
    ) -> None: ...

    async def sweep_leftovers(self, open_uploads: set[str]) -> tuple[int, int]:
        """At start: remove what a crash left behind (temporary files older than the
        store's opening, parts of uploads not in `open_uploads`); returns (files, bytes)."""
        ...
