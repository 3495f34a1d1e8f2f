"""In-memory audit chain, metric history and artifact records: the repositories of
store_audit, store_metrics and store_artifacts over storage/memory.py's tables, with
their SQL twins' contracts (tests/storage/test_storage_contract.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunefleet.storage.errors import AlreadyExists
from tunefleet.storage.memory_tables import Tables, foreign_key_failed, fresh, stored_row
from tunefleet.storage.models import (
    Artifact,
    AuditEvent,
    Checkpoint,
    JobMetric,
    MultipartUpload,
    UploadToken,
    canonical_json,
)
from tunefleet.storage.rows import AuditEventRow, JobMetricRow
from tunefleet.storage.store_artifacts import (
    ArtifactRepo,
    ArtifactRow,
    CheckpointRow,
    MultipartRow,
    TokenScope,
    UploadTokenRow,
    artifact_values,
    checkpoint_values,
    multipart_values,
)
from tunefleet.storage.store_audit import (
    GENESIS_HASH,
    AuditLink,
    AuditRepo,
    ChainCheck,
    chained_values,
    check_rows,
    hashed_fields,
)
from tunefleet.storage.store_base import Now, page
from tunefleet.storage.store_metrics import MAX_POINTS_PER_ATTEMPT, MetricRepo, thinned_out


class MemoryAuditRepo(AuditRepo):
    def __init__(self, now: Now, tables: Tables) -> None:
        self._now = now
        self._t = tables

    def forget_chain_head(self) -> None:
        """Nothing to forget: the newest event is read from the table each time."""

    def append(
        self,
        kind: str,
        *,
        actor: str | None = None,
        client_address: str | None = None,
        target: str | None = None,
        outcome: str = "ok",
        detail: dict[str, Any] | None = None,
        at: float | None = None,
    ) -> AuditEventRow:
        when = self._now() if at is None else at
        events = self._t.audit_events
        prev_hash = next(reversed(events.values())).hash if events else GENESIS_HASH
        event = hashed_fields(when, kind, actor, client_address, target, outcome, detail)
        values = chained_values(prev_hash, event)
        return fresh(self._t.insert("audit_events", AuditEventRow, AuditEvent, values))

    def add(
        self,
        kind: str,
        *,
        actor: str | None = None,
        client_address: str | None = None,
        target: str | None = None,
        outcome: str = "ok",
        detail: dict[str, Any] | None = None,
        at: float | None = None,
    ) -> AuditLink:
        row = self.append(
            kind,
            actor=actor,
            client_address=client_address,
            target=target,
            outcome=outcome,
            detail=detail,
            at=at,
        )
        return AuditLink(row.id, row.hash)

    def find(
        self,
        *,
        kind: str | None = None,
        actor: str | None = None,
        target: str | None = None,
        outcome: str | None = None,
        since: float | None = None,
        until: float | None = None,
        newest_first: bool = True,
        limit: int = 100,
        offset: int = 0,
    ) -> list[AuditEventRow]:
        limit, offset = page(limit, offset)
        found = [
            e
            for e in self._t.audit_events.values()
            if (kind is None or e.kind == kind)
            and (actor is None or e.actor == actor)
            and (target is None or e.target == target)
            and (outcome is None or e.outcome == outcome)
            and (since is None or e.at >= since)
            and (until is None or e.at < until)
        ]
        if newest_first:
            found.reverse()
        return [fresh(e) for e in found[offset : offset + limit]]

    def check_chain(self, after_id: int, prev_hash: str, limit: int) -> ChainCheck:
        batch = [e for e in self._t.audit_events.values() if e.id > after_id][:limit]
        return check_rows(batch, after_id, prev_hash)


class MemoryMetricRepo(MetricRepo):
    def __init__(self, tables: Tables) -> None:
        self._t = tables

    def forget_counts(self) -> None:
        """Nothing to forget: counts are read from the table each time."""

    def append(
        self, job_id: str, attempt: int, step: int, values: Mapping[str, float], at: float
    ) -> bool:
        if job_id not in self._t.jobs:
            raise foreign_key_failed("job_metric")
        points = self._t.job_metrics
        for point_id, point in list(points.items()):
            if (point.job_id, point.attempt, point.step) == (job_id, attempt, step):
                if canonical_json(point.values) == canonical_json(values):
                    return False
                del points[point_id]  # replaced, with a new id (readers follow `since`)
        row = {"job": job_id, "attempt": attempt, "step": step, "at": at, "values": dict(values)}
        self._t.insert("job_metrics", JobMetricRow, JobMetric, row)
        if self.count(job_id, attempt) > MAX_POINTS_PER_ATTEMPT:
            self._thin(job_id, attempt)
        return True

    def read(
        self, job_id: str, *, since: int = 0, limit: int, attempt: int | None = None
    ) -> list[JobMetricRow]:
        found = [
            p
            for p in self._t.job_metrics.values()
            if p.job_id == job_id and p.id > since and (attempt is None or p.attempt == attempt)
        ]
        return [fresh(p) for p in found[:limit]]

    def count(self, job_id: str, attempt: int) -> int:
        return len(self._points(job_id, attempt))

    def _points(self, job_id: str, attempt: int) -> list[JobMetricRow]:
        return [
            p for p in self._t.job_metrics.values() if (p.job_id, p.attempt) == (job_id, attempt)
        ]

    def _thin(self, job_id: str, attempt: int) -> int:
        points = sorted(self._points(job_id, attempt), key=lambda p: (p.step, p.id))
        drop = thinned_out([(p.id, p.step) for p in points])
        for point_id in drop:
            del self._t.job_metrics[point_id]
        return len(points) - len(drop)


class MemoryArtifactRepo(ArtifactRepo):
    def __init__(self, now: Now, tables: Tables) -> None:
        self._now = now
        self._t = tables

    # --- upload tokens ------------------------------------------------------------------

    def add_token(self, job_id: str, attempt: int, token_hash: str) -> None:
        self._job(job_id, "upload_token")
        tokens = self._t.upload_tokens
        if any(t.token_hash == token_hash for t in tokens.values()):
            raise AlreadyExists("this upload token hash is already in use")
        values = {
            "job": job_id,
            "attempt": attempt,
            "token_hash": token_hash,
            "created_at": self._now(),
        }
        self._t.insert("upload_tokens", UploadTokenRow, UploadToken, values)

    def token_scope(self, token_hash: str) -> TokenScope | None:
        for token in self._t.upload_tokens.values():
            if token.token_hash == token_hash:
                job = self._t.jobs[token.job_id]
                return TokenScope(token.job_id, token.attempt, job.state, job.attempts)
        return None

    # --- objects ------------------------------------------------------------------------

    def put(
        self, job_id: str, key: str, size: int, sha256: str | None, attempt: int
    ) -> ArtifactRow:
        self._job(job_id, "artifact")
        self._drop(self._t.artifacts, lambda a: a.job_id == job_id and a.key == key)
        values = artifact_values(job_id, key, size, sha256, attempt, self._now())
        return fresh(self._t.insert("artifacts", ArtifactRow, Artifact, values))

    def get(self, job_id: str, key: str) -> ArtifactRow | None:
        for row in self._t.artifacts.values():
            if row.job_id == job_id and row.key == key:
                return fresh(row)
        return None

    def objects(self, job_id: str, prefix: str = "") -> list[ArtifactRow]:
        found = [
            a for a in self._t.artifacts.values() if a.job_id == job_id and a.key.startswith(prefix)
        ]
        return [fresh(a) for a in sorted(found, key=lambda a: a.key)]

    def sizes(self, job_id: str) -> list[int]:
        return sorted(a.size for a in self._t.artifacts.values() if a.job_id == job_id)

    def delete_prefix(self, job_id: str, prefix: str) -> int:
        return self._drop(
            self._t.artifacts, lambda a: a.job_id == job_id and a.key.startswith(prefix)
        )

    # --- checkpoints --------------------------------------------------------------------

    def add_checkpoint(
        self, job_id: str, name: str, step: int, attempt: int, size: int
    ) -> CheckpointRow:
        self._job(job_id, "checkpoint")
        self._drop(self._t.checkpoints, lambda c: c.job_id == job_id and c.name == name)
        values = checkpoint_values(job_id, name, step, attempt, size, self._now())
        return fresh(self._t.insert("checkpoints", CheckpointRow, Checkpoint, values))

    def checkpoints(self, job_id: str) -> list[CheckpointRow]:
        found = [c for c in self._t.checkpoints.values() if c.job_id == job_id]
        return [fresh(c) for c in sorted(found, key=lambda c: (c.step, c.id), reverse=True)]

    def latest_checkpoint(self, job_id: str) -> CheckpointRow | None:
        found = self.checkpoints(job_id)
        return found[0] if found else None

    def drop_checkpoint(self, job_id: str, name: str) -> None:
        self._drop(self._t.checkpoints, lambda c: c.job_id == job_id and c.name == name)
        self.delete_prefix(job_id, name + "/")

    def forget_job(self, job_id: str) -> None:
        self._drop(self._t.artifacts, lambda a: a.job_id == job_id)
        self._drop(self._t.checkpoints, lambda c: c.job_id == job_id)
        self._drop(self._t.multiparts, lambda m: m.job_id == job_id)

    # --- multipart uploads --------------------------------------------------------------

    def add_multipart(
        self, upload_id: str, job_id: str, key: str, attempt: int, backend_id: str | None
    ) -> None:
        self._job(job_id, "multipart_upload")
        if upload_id in self._t.multiparts:
            raise AlreadyExists(f"multipart upload {upload_id} already exists")
        values = multipart_values(upload_id, job_id, key, attempt, backend_id, self._now())
        self._t.multiparts[upload_id] = stored_row(MultipartRow, MultipartUpload, values)

    def multipart(self, upload_id: str) -> MultipartRow | None:
        row = self._t.multiparts.get(upload_id)
        return fresh(row) if row is not None else None

    def multiparts(self, job_id: str) -> list[MultipartRow]:
        return [fresh(m) for m in self._t.multiparts.values() if m.job_id == job_id]

    def drop_multipart(self, upload_id: str) -> None:
        self._t.multiparts.pop(upload_id, None)

    def every_multipart(self) -> list[tuple[MultipartRow, TokenScope]]:
        found = []
        for row in self._t.multiparts.values():
            job = self._t.jobs[row.job_id]
            found.append((fresh(row), TokenScope(row.job_id, row.attempt, job.state, job.attempts)))
        return found

    def _job(self, job_id: str, table: str) -> None:
        if job_id not in self._t.jobs:
            raise foreign_key_failed(table)

    @staticmethod
    def _drop(table: dict[Any, Any], doomed: Any) -> int:
        keys = [key for key, row in table.items() if doomed(row)]
        for key in keys:
            del table[key]
        return len(keys)
