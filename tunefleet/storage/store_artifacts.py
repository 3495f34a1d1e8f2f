"""Artifacts' records: upload tokens, stored objects, complete checkpoints, unfinished
multipart uploads. The bytes live in an artifact store (tunefleet.artifacts); these rows
say what is there and whose it is.

`ArtifactRepo` is synchronous (DB thread); `ArtifactRecords` is what the event loop awaits.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import peewee as pw

from tunefleet.storage.models import (
    Artifact,
    Checkpoint,
    Job,
    MultipartUpload,
    UploadToken,
)
from tunefleet.storage.rows import first_of, inserted, rows_of
from tunefleet.storage.statements import insert_row, select_where
from tunefleet.storage.store_base import Connector, Now


@dataclass(frozen=True, slots=True)
class UploadTokenRow:
    id: int
    job_id: str
    attempt: int
    token_hash: str
    created_at: float


@dataclass(frozen=True, slots=True)
class ArtifactRow:
    id: int
    job_id: str
    key: str
    size: int
    sha256: str | None
    attempt: int
    created_at: float


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    id: int
    job_id: str
    name: str
    step: int
    attempt: int
    bytes: int
    created_at: float


@dataclass(frozen=True, slots=True)
class MultipartRow:
    id: str
    job_id: str
    key: str
    attempt: int
    backend_id: str | None
    created_at: float


@dataclass(frozen=True, slots=True)
class TokenScope:
    """What an upload token opens: one job's prefix, for one attempt, while it is live."""

    job_id: str
    attempt: int
    job_state: str
    job_attempts: int


# The columns each insert stores (but an auto-numbered id), built here for the SQL
# repository and its in-memory twin (storage/memory_records.py) alike.
def artifact_values(
    job_id: str, key: str, size: int, sha256: str | None, attempt: int, now: float
) -> dict[str, Any]:
    return {
        "job": job_id,
        "key": key,
        "size": size,
        "sha256": sha256,
        "attempt": attempt,
        "created_at": now,
    }


def checkpoint_values(
    job_id: str, name: str, step: int, attempt: int, size: int, now: float
) -> dict[str, Any]:
    return {
        "job": job_id,
        "name": name,
        "step": step,
        "attempt": attempt,
        "bytes": size,
        "created_at": now,
    }


def multipart_values(
    upload_id: str, job_id: str, key: str, attempt: int, backend_id: str | None, now: float
) -> dict[str, Any]:
    return {
        "id": upload_id,
        "job": job_id,
        "key": key,
        "attempt": attempt,
        "backend_id": backend_id,
        "created_at": now,
    }


class ArtifactRepo:
    def __init__(self, now: Now) -> None:
        self._now = now

    # --- upload tokens ------------------------------------------------------------------

    def add_token(self, job_id: str, attempt: int, token_hash: str) -> None:
        values = {"job": job_id, "attempt": attempt, "token_hash": token_hash}
        insert_row(UploadToken, {**values, "created_at": self._now()})

    def token_scope(self, token_hash: str) -> TokenScope | None:
        row = (
            UploadToken.select(UploadToken.job, UploadToken.attempt, Job.state, Job.attempts)
            .join(Job, on=UploadToken.job == Job.id)
            .where(UploadToken.token_hash == token_hash)
            .tuples()
            .first()
        )
        if row is None:
            return None
        job_id, attempt, state, attempts = row
        return TokenScope(job_id, attempt, state, attempts)

    # --- objects ------------------------------------------------------------------------

    def put(
        self, job_id: str, key: str, size: int, sha256: str | None, attempt: int
    ) -> ArtifactRow:
        """Record an object (replacing the record of an earlier upload of the same key)."""
        Artifact.delete().where(Artifact.job == job_id, Artifact.key == key).execute()
        values = artifact_values(job_id, key, size, sha256, attempt, self._now())
        return inserted(ArtifactRow, Artifact, insert_row(Artifact, values))

    def get(self, job_id: str, key: str) -> ArtifactRow | None:
        query = Artifact.select().where(Artifact.job == job_id, Artifact.key == key)
        return first_of(ArtifactRow, query)

    def objects(self, job_id: str, prefix: str = "") -> list[ArtifactRow]:
        query = _under(Artifact.select().where(Artifact.job == job_id), prefix)
        return rows_of(ArtifactRow, query.order_by(Artifact.key))

    def sizes(self, job_id: str) -> list[int]:
        """The size of each object stored for the job: read on every completed report,
        so cached SQL rather than a peewee query building rows nobody looks at."""
        return sorted(size for (size,) in select_where(Artifact, ["size"], equal={"job": job_id}))

    def delete_prefix(self, job_id: str, prefix: str) -> int:
        return int(_under(Artifact.delete().where(Artifact.job == job_id), prefix).execute())

    # --- checkpoints --------------------------------------------------------------------

    def add_checkpoint(
        self, job_id: str, name: str, step: int, attempt: int, size: int
    ) -> CheckpointRow:
        Checkpoint.delete().where(Checkpoint.job == job_id, Checkpoint.name == name).execute()
        values = checkpoint_values(job_id, name, step, attempt, size, self._now())
        return inserted(CheckpointRow, Checkpoint, insert_row(Checkpoint, values))

    def checkpoints(self, job_id: str) -> list[CheckpointRow]:
        """Newest (highest step) first."""
        query = Checkpoint.select().where(Checkpoint.job == job_id)
        return rows_of(CheckpointRow, query.order_by(Checkpoint.step.desc(), Checkpoint.id.desc()))

    def latest_checkpoint(self, job_id: str) -> CheckpointRow | None:
        query = Checkpoint.select().where(Checkpoint.job == job_id)
        return first_of(CheckpointRow, query.order_by(Checkpoint.step.desc(), Checkpoint.id.desc()))

    def drop_checkpoint(self, job_id: str, name: str) -> None:
        """Forget a checkpoint and its objects' records (the caller deletes the bytes)."""
        Checkpoint.delete().where(Checkpoint.job == job_id, Checkpoint.name == name).execute()
        self.delete_prefix(job_id, name + "/")

    def forget_job(self, job_id: str) -> None:
        for model in (Artifact, Checkpoint, MultipartUpload):
            model.delete().where(model.job == job_id).execute()

    # --- multipart uploads --------------------------------------------------------------

    def add_multipart(
        self, upload_id: str, job_id: str, key: str, attempt: int, backend_id: str | None
    ) -> None:
        values = multipart_values(upload_id, job_id, key, attempt, backend_id, self._now())
        insert_row(MultipartUpload, values)

    def multipart(self, upload_id: str) -> MultipartRow | None:
        return first_of(
            MultipartRow, MultipartUpload.select().where(MultipartUpload.id == upload_id)
        )

    def multiparts(self, job_id: str) -> list[MultipartRow]:
        return rows_of(MultipartRow, MultipartUpload.select().where(MultipartUpload.job == job_id))

    def drop_multipart(self, upload_id: str) -> None:
        MultipartUpload.delete().where(MultipartUpload.id == upload_id).execute()

    def every_multipart(self) -> list[tuple[MultipartRow, TokenScope]]:
        """Every unfinished upload, with the state of the attempt that started it."""
        m = MultipartUpload
        query: Any = (
            m.select(m.id, m.job, m.key, m.attempt, m.backend_id, m.created_at)
            .select_extend(Job.state, Job.attempts)
            .join(Job, on=m.job == Job.id)
            .tuples()
        )
        found = []
        for values in query:
            row = MultipartRow(*values[:6])
            found.append((row, TokenScope(row.job_id, row.attempt, *values[6:])))
        return found


class ArtifactRecords:
    """The artifact rows, awaited from the event loop (one DB read or write each)."""

    def __init__(self, db: Connector, now: Now, repo: ArtifactRepo | None = None) -> None:
        self.db = db
        self.repo = repo if repo is not None else ArtifactRepo(now)

    async def token_scope(self, token_hash: str) -> TokenScope | None:
        return await self.db.read(partial(self.repo.token_scope, token_hash))

    async def add_token(self, job_id: str, attempt: int, token_hash: str) -> None:
        await self.db.write(partial(self.repo.add_token, job_id, attempt, token_hash))

    async def put(
        self, job_id: str, key: str, size: int, sha256: str | None, attempt: int
    ) -> ArtifactRow:
        return await self.db.write(partial(self.repo.put, job_id, key, size, sha256, attempt))

    async def get(self, job_id: str, key: str) -> ArtifactRow | None:
        return await self.db.read(partial(self.repo.get, job_id, key))

    async def objects(self, job_id: str, prefix: str = "") -> list[ArtifactRow]:
        return await self.db.read(partial(self.repo.objects, job_id, prefix))

    async def sizes(self, job_id: str) -> list[int]:
        return await self.db.read(partial(self.repo.sizes, job_id))

    async def add_checkpoint(
        self, job_id: str, name: str, step: int, attempt: int, size: int
    ) -> CheckpointRow:
        return await self.db.write(
            partial(self.repo.add_checkpoint, job_id, name, step, attempt, size)
        )

    async def checkpoints(self, job_id: str) -> list[CheckpointRow]:
        return await self.db.read(partial(self.repo.checkpoints, job_id))

    async def latest_checkpoint(self, job_id: str) -> CheckpointRow | None:
        return await self.db.read(partial(self.repo.latest_checkpoint, job_id))

    async def drop_checkpoint(self, job_id: str, name: str) -> None:
        await self.db.write(partial(self.repo.drop_checkpoint, job_id, name))

    async def forget_job(self, job_id: str) -> None:
        await self.db.write(partial(self.repo.forget_job, job_id))

    async def add_multipart(
        self, upload_id: str, job_id: str, key: str, attempt: int, backend_id: str | None
    ) -> None:
        await self.db.write(
            partial(self.repo.add_multipart, upload_id, job_id, key, attempt, backend_id)
        )

    async def multipart(self, upload_id: str) -> MultipartRow | None:
        return await self.db.read(partial(self.repo.multipart, upload_id))

    async def multiparts(self, job_id: str) -> list[MultipartRow]:
        return await self.db.read(partial(self.repo.multiparts, job_id))

    async def drop_multipart(self, upload_id: str) -> None:
        await self.db.write(partial(self.repo.drop_multipart, upload_id))

    async def every_multipart(self) -> list[tuple[MultipartRow, TokenScope]]:
        return await self.db.read(self.repo.every_multipart)


def _under(query: Any, prefix: str) -> Any:
    """The rows of ``query`` whose key starts with ``prefix`` (all of them for "").
    Not LIKE: keys may hold % and _, so the leading characters are compared exactly."""
    if not prefix:
        return query
    return query.where(pw.fn.SUBSTR(Artifact.key, 1, len(prefix)) == prefix)
