"""Artifacts: what the HTTP adapters ask of the artifact store and its records.

Who may write (an upload token, scoped to one job and attempt, live only while that
attempt runs), what completes a checkpoint (its manifest, uploaded last), retention
(the newest `keep_checkpoints` per job), and the timeline entries users read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import structlog

from tunefleet.artifacts.keys import check_key, is_manifest, manifest_checkpoint
from tunefleet.artifacts.store import ArtifactStore, StoredObject
from tunefleet.audit import AuditKind, AuditLog
from tunefleet.errors import BadRequest, NotFound, TunefleetError
from tunefleet.fsm.job import JobState
from tunefleet.storage.store import Store
from tunefleet.storage.store_artifacts import ArtifactRow
from tunefleet.tokens import hash_token

log = structlog.get_logger(__name__)

MAX_MANIFEST_BYTES = 16 * 1024 * 1024
# Submitted jobs remembered as having stored nothing yet (about 100 bytes each).
NOTHING_STORED_LIMIT = 10_000
_LIVE_STATES = (JobState.DISPATCHED, JobState.RUNNING)  # an attempt may still upload
# Timeline kinds (job_event.kind); each entry's detail carries the sentence users read.
CHECKPOINT_STORED = "checkpoint_stored"
ARTIFACTS_STORED = "artifacts_stored"
ARTIFACTS_NOT_STORED = "artifacts_not_stored"
RESUMED = "resumed"


class UploadDenied(Exception):
    """401 with this one-line detail (never the token)."""


@dataclass(frozen=True, slots=True)
class UploadScope:
    job_id: str
    attempt: int

    @property
    def actor(self) -> str:
        return f"upload:{self.job_id}#{self.attempt}"


class Artifacts:
    def __init__(
        self, store: ArtifactStore, db: Store, audit: AuditLog, keep_checkpoints: int
    ) -> None:
        self.store = store
        self.db = db
        self.records = db.artifacts
        self.audit = audit
        self.keep_checkpoints = keep_checkpoints
        # Jobs that started a multipart upload since this process started: when one ends,
        # what it left unfinished is aborted (a set lookup for every other job's end).
        self._multipart_jobs: set[str] = set()
        # Jobs submitted since this process started that no upload has reached yet
        # (oldest first, bounded): a completed report of one of them has nothing stored
        # to count, so its outcome skips the read of the job's sizes, on every job cycle.
        # Jobs from before the start, or forgotten here, are read as always.
        self._nothing_stored: dict[str, None] = {}
        self._sweeps: set[asyncio.Task[None]] = set()
        # Writes of one key, one at a time (lock, writers waiting or holding it).
        self._writers: dict[tuple[str, str], tuple[asyncio.Lock, list[int]]] = {}

    # --- who is uploading ---------------------------------------------------------------

    async def scope_for(self, token: str | None) -> UploadScope:
        """The job and attempt an upload token opens, while that attempt is live."""
        if not token:
            raise UploadDenied("Missing X-Upload-Token: send the upload_token of the job_submit")
        scope = await self.records.token_scope(hash_token(token.strip()))
        if scope is None:
            raise UploadDenied("Invalid upload token")
        if scope.job_state not in _LIVE_STATES or scope.job_attempts != scope.attempt:
            raise UploadDenied(
                f"upload token for job {scope.job_id} attempt {scope.attempt} no longer "
                f"works: that attempt ended (the job is {scope.job_state}, on attempt "
                f"{scope.job_attempts})"
            )
        self._nothing_stored.pop(scope.job_id, None)  # before anything of it is stored
        return UploadScope(scope.job_id, scope.attempt)

    def note_new_job(self, job_id: str) -> None:
        """A job submitted now: nothing of it is stored until an upload opens its scope."""
        if self.store.presigns:
            return  # workers may put straight into the bucket: only a listing tells
        self._nothing_stored[job_id] = None
        if len(self._nothing_stored) > NOTHING_STORED_LIMIT:
            # Jobs that ended another way linger; forgetting one only costs it a read.
            del self._nothing_stored[next(iter(self._nothing_stored))]

    # --- writes -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def writing(self, job_id: str, key: str) -> AsyncIterator[None]:
        """Hold while storing one key and recording it: two uploads of the same key are
        taken one after the other, so the record always describes the bytes that won the
        rename (never one upload's checksum over the other's file)."""
        slot = (job_id, key)
        lock, users = self._writers.setdefault(slot, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._writers[slot]

    async def start_multipart(self, scope: UploadScope, key: str) -> str:
        upload_id = uuid.uuid4().hex
        backend_id = await self.store.start_multipart(scope.job_id, key, upload_id)
        await self.records.add_multipart(upload_id, scope.job_id, key, scope.attempt, backend_id)
        self._multipart_jobs.add(scope.job_id)
        return upload_id

    def job_ended(self, job_id: str) -> None:
        """The job reached a terminal state: abort its unfinished multipart uploads in the
        background (no token can finish them now), so their parts do not stay forever."""
        if job_id not in self._multipart_jobs:
            return
        self._multipart_jobs.discard(job_id)
        task = asyncio.create_task(self._abort_uploads(job_id), name=f"abort-uploads-{job_id}")
        self._sweeps.add(task)
        task.add_done_callback(self._sweeps.discard)

    async def _abort_uploads(self, job_id: str) -> None:
        for upload in await self.records.multiparts(job_id):
            try:
                await self.store.abort_multipart(job_id, upload.key, upload.id, upload.backend_id)
                await self.records.drop_multipart(upload.id)
            except Exception:
                log.exception("could not abort an unfinished upload", job_id=job_id)

    def start_tidying(self) -> None:
        """Run `tidy` in the background: a slow or unreachable bucket must not hold up
        the start."""

        async def tidy() -> None:
            try:
                await self.tidy()
            except Exception:
                log.exception("could not tidy the artifact store; tried again next start")

        task = asyncio.create_task(tidy(), name="tidy-artifacts")
        self._sweeps.add(task)
        task.add_done_callback(self._sweeps.discard)

    async def close(self) -> None:
        """Stop the background aborts and sweeps (what they left is tidied next start)."""
        for task in list(self._sweeps):
            task.cancel()
        await asyncio.gather(*self._sweeps, return_exceptions=True)

    async def tidy(self) -> None:
        """At start (or on taking over): abort the unfinished uploads no token can finish
        any more (their attempt ended, or a retry superseded it, while no orchestrator
        watched), watch the live ones' jobs so they are aborted when those end, and
        remove the temporary files a crash left behind."""
        aborted = 0
        still_open: set[str] = set()
        for upload, owner in await self.records.every_multipart():
            if owner.job_state in _LIVE_STATES and owner.job_attempts == owner.attempt:
                still_open.add(upload.id)
                self._multipart_jobs.add(upload.job_id)
                continue
            try:
                with contextlib.suppress(NotFound):  # already gone from the bucket
                    await self.store.abort_multipart(
                        upload.job_id, upload.key, upload.id, upload.backend_id
                    )
                await self.records.drop_multipart(upload.id)
                aborted += 1
            except Exception:
                still_open.add(upload.id)  # tried again at the next start
                log.exception("could not abort an unfinished upload", job_id=upload.job_id)
        files, freed = await self.store.sweep_leftovers(still_open)
        if aborted or files:
            log.info(
                "artifact store tidied",
                uploads_aborted=aborted,
                leftover_files=files,
                bytes_freed=freed,
            )

    async def stored(
        self, scope: UploadScope, key: str, obj: StoredObject, client: str | None
    ) -> ArtifactRow:
        """Record an object the store now holds durably."""
        row = await self.records.put(scope.job_id, key, obj.size, obj.sha256, scope.attempt)
        await self.audit.record(
            AuditKind.ARTIFACT_UPLOADED,
            actor=scope.actor,
            target=scope.job_id,
            client_address=client,
            key=key,
            size=obj.size,
            sha256=obj.sha256,
        )
        return row

    async def put_manifest(
        self, scope: UploadScope, key: str, data: bytes, client: str | None
    ) -> ArtifactRow:
        """Store a manifest only once every file it lists is stored with the size (and
        checksum) it says. A checkpoint's makes the checkpoint complete; the outputs
        manifest at the root gives files put straight into a bucket their SHA-256."""
        named = manifest_checkpoint(key)
        prefix = named[0] + "/" if named is not None else ""
        files = _manifest_files(data, named)
        stored = await self._stored_under(scope.job_id, prefix)
        total = 0
        for entry in files:
            have = stored.get(entry["key"])
            if have is None:
                raise BadRequest(
                    f"the manifest lists {entry['key']}, which is not stored; upload every "
                    "file it lists before the manifest"
                )
            size, sha256 = have
            if size != entry["size"] or (sha256 and entry["sha256"] and sha256 != entry["sha256"]):
                raise BadRequest(
                    f"{entry['key']} is stored with size {size} and SHA-256 {sha256}, not as "
                    "the manifest says; upload it again, then the manifest"
                )
            total += size
        if self.store.presigns:
            # The bucket took the files directly: their checksums come from the manifest.
            for entry in files:
                await self.records.put(
                    scope.job_id, entry["key"], entry["size"], entry["sha256"], scope.attempt
                )
        obj = await self.store.put_bytes(scope.job_id, key, data)
        row = await self.stored(scope, key, obj, client)
        if named is None:
            return row
        name, step = named
        await self.records.add_checkpoint(scope.job_id, name, step, scope.attempt, total)
        await self.db.append_job_event(
            scope.job_id,
            CHECKPOINT_STORED,
            attempt=scope.attempt,
            detail={"message": f"{name} stored", "checkpoint": name, "step": step, "bytes": total},
        )
        await self.apply_retention(scope.job_id)
        return row

    async def _stored_under(self, job_id: str, prefix: str) -> dict[str, tuple[int, str | None]]:
        if self.store.presigns:
            listed = await self.store.list_objects(job_id, prefix)
            return {o.key: (o.size, None) for o in listed}
        return {r.key: (r.size, r.sha256) for r in await self.records.objects(job_id, prefix)}

    async def sync_bucket(self, job_id: str) -> None:
        """Record objects workers put straight into the bucket (a presigned PUT passes
        the orchestrator by), with their size; their SHA-256 is known only from a
        manifest. Nothing to do for the embedded store, which records every write."""
        if not self.store.presigns:
            return
        known = {r.key: r.size for r in await self.records.objects(job_id)}
        listed = await self.store.list_objects(job_id)
        if all(known.get(o.key) == o.size for o in listed):
            return
        job = await self.db.get_job(job_id)
        attempt = job.attempts if job is not None else 0
        for obj in listed:
            if known.get(obj.key) != obj.size:
                await self.records.put(job_id, obj.key, obj.size, None, attempt)

    async def apply_retention(self, job_id: str) -> list[str]:
        """Delete all but the newest `keep_checkpoints` complete checkpoints of a job."""
        dropped = []
        for old in (await self.records.checkpoints(job_id))[self.keep_checkpoints :]:
            # Records first: a checkpoint never looks complete while its bytes go.
            await self.records.drop_checkpoint(job_id, old.name)
            await self.store.delete_prefix(job_id, old.name + "/")
            dropped.append(old.name)
        if dropped:
            log.info("old checkpoints deleted", job_id=job_id, checkpoints=dropped)
        return dropped

    async def resume_checkpoint(self, job_id: str) -> str | None:
        latest = await self.records.latest_checkpoint(job_id)
        return latest.name if latest is not None else None

    # --- the end of an attempt ----------------------------------------------------------

    async def record_outcome(self, job_id: str, attempt: int, outputs: Any) -> None:
        """The timeline line of a completed attempt: what is stored, or why not."""
        nothing_stored = job_id in self._nothing_stored
        self._nothing_stored.pop(job_id, None)
        if isinstance(outputs, dict) and outputs.get("stored") is False:
            reason = str(outputs.get("reason") or "no reason given")[:300]
            await self.db.append_job_event(
                job_id,
                ARTIFACTS_NOT_STORED,
                attempt=attempt,
                detail={"message": f"artifacts not stored: {reason}", "reason": reason},
            )
            return
        if nothing_stored:
            return
        await self.sync_bucket(job_id)
        sizes = await self.records.sizes(job_id)
        if not sizes:
            return
        total = sum(sizes)
        message = f"artifacts stored ({len(sizes)} files, {total} bytes)"
        await self.db.append_job_event(
            job_id,
            ARTIFACTS_STORED,
            attempt=attempt,
            detail={"message": message, "files": len(sizes), "bytes": total},
        )

    # --- users --------------------------------------------------------------------------

    async def delete_job(self, job_id: str, actor: str) -> int:
        rows = await self.records.objects(job_id)
        for upload in await self.records.multiparts(job_id):
            # Parts of uploads never completed would otherwise stay on disk (or in the
            # bucket, billed) forever.
            with contextlib.suppress(TunefleetError):
                await self.store.abort_multipart(job_id, upload.key, upload.id, upload.backend_id)
        await self.records.forget_job(job_id)
        await self.store.delete_prefix(job_id)
        await self.audit.record(
            AuditKind.ARTIFACTS_DELETED, actor=actor, target=job_id, objects=len(rows)
        )
        return len(rows)

    async def downloaded(self, job_id: str, key: str, actor: str, client: str | None) -> None:
        """Audit a download. A read must not fail for a write: if the database refuses
        the event it is held and stored later (audit_held), and the bytes are served."""
        await self.audit.record(
            AuditKind.ARTIFACT_DOWNLOADED,
            actor=actor,
            target=job_id,
            client_address=client,
            serve_anyway=True,
            key=key,
        )


def _manifest_files(data: bytes, named: tuple[str, int] | None) -> list[dict[str, Any]]:
    whose = f"{named[0]}'s manifest" if named is not None else "the outputs manifest"
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise BadRequest(f"{whose} is not JSON; send the manifest object") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise BadRequest(f'{whose} must be an object with a "files" list')
    if named is not None:
        name, step = named
        if manifest.get("checkpoint", name) != name or manifest.get("step", step) != step:
            raise BadRequest(f"the manifest names another checkpoint than {name} (step {step})")
    prefix = named[0] + "/" if named is not None else ""
    files = []
    for entry in manifest["files"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            raise BadRequest('each manifest file must be an object with "key", "size", "sha256"')
        key = check_key(entry["key"])
        if not key.startswith(prefix) or is_manifest(key):
            raise BadRequest(f"the manifest lists {key}, which it cannot describe")
        size = entry.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BadRequest(f"the manifest's size of {key} must be a whole number of bytes")
        sha256 = entry.get("sha256")
        if sha256 is not None and not isinstance(sha256, str):
            raise BadRequest(f"the manifest's sha256 of {key} must be a hex string")
        files.append({"key": key, "size": size, "sha256": sha256.lower() if sha256 else None})
    return files
