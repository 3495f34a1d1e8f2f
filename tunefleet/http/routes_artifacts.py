"""The S3-spelled upload endpoint workers and trainers store outputs through:
``{upload_endpoint}/{bucket}/{key}`` with ``X-Upload-Token`` (docs/api.md, "Artifacts").

The bucket segment is accepted and ignored: the token decides the job, and a key is
always relative to that job's prefix. Which operation a request is follows S3: the
query (``?uploads``, ``?uploadId=``, ``?partNumber=``) picks multipart steps. These
routes are left out of the OpenAPI document: one path, several S3 operations by query,
raw bytes in and out, which OpenAPI cannot describe faithfully.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import HttpVersion11, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.web_request import BaseRequest
from pydantic import BaseModel, Field

from tunefleet.artifacts.keys import check_key, check_prefix, is_manifest
from tunefleet.artifacts.service import MAX_MANIFEST_BYTES, Artifacts, UploadDenied, UploadScope
from tunefleet.artifacts.store import MAX_PARTS, PART_BYTES, Checks
from tunefleet.http import keys
from tunefleet.http.auth import (
    ApiPrincipal,
    admit_credential,
    credential_good,
    refuse_credential,
)
from tunefleet.http.body import parse_body, read_body
from tunefleet.http.byte_ranges import refuse_unsatisfiable
from tunefleet.http.errors import ApiError, error_response
from tunefleet.http.principal_streams import held_stream
from tunefleet.http.route_table import check_disk, routes
from tunefleet.http.tokens import hash_token
from tunefleet.storage.store_artifacts import ArtifactRow

UPLOAD_TOKEN_HEADER = "X-Upload-Token"
_OBJECT = "/api/artifacts/{bucket}/{key:.+}"
_BUCKET = "/api/artifacts/{bucket}"


class CompletedPart(BaseModel):
    part_number: int = Field(ge=1, le=MAX_PARTS)
    etag: str = Field(max_length=130)


class CompleteMultipart(BaseModel):
    parts: list[CompletedPart] = Field(min_length=1, max_length=MAX_PARTS)


def artifacts_of(request: web.Request) -> Artifacts:
    artifacts = request.app.get(keys.ARTIFACTS)
    if artifacts is None:
        raise ApiError(503, "the orchestrator is starting; try again in a moment")
    return artifacts


def _upload_token_hash(request: web.Request) -> str | None:
    token = request.headers.get(UPLOAD_TOKEN_HEADER, "").strip()
    return hash_token(token) if token else None


async def _scope(request: web.Request) -> tuple[Artifacts, UploadScope]:
    artifacts = artifacts_of(request)
    token_hash = _upload_token_hash(request)
    admit_credential(request, "upload", token_hash)
    try:
        scope = await artifacts.scope_for(request.headers.get(UPLOAD_TOKEN_HEADER))
    except UploadDenied as denied:
        await refuse_credential(request, "upload", str(denied), token_hash)
        raise ApiError(401, str(denied)) from None
    if token_hash is not None:
        credential_good(request, token_hash)
    return artifacts, scope


def _key(request: web.Request) -> str:
    return check_key(request.match_info["key"])


def _bytes_in(request: web.Request) -> AsyncIterator[bytes]:
    """The body's bytes for the data-directory store, stopped with 507 if the disk falls
    below the free-space floor on the way (a bucket store's bytes never come here)."""
    chunks = request.content.iter_any()
    guard = request.app.get(keys.DISK_GUARD)
    return chunks if guard is None else guard.watch(chunks, "artifact bytes")


def _redirect(url: str) -> web.Response:
    return web.Response(status=307, headers={"Location": url})


def _part_number(request: web.Request) -> int:
    raw = request.query.get("partNumber", "")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PARTS:
        raise ApiError(400, f"partNumber must be a whole number from 1 to {MAX_PARTS}")
    return int(raw)


async def _multipart(
    artifacts: Artifacts, scope: UploadScope, key: str, upload_id: str
) -> tuple[str | None, Any]:
    row = await artifacts.records.multipart(upload_id[:64])
    if row is None or row.job_id != scope.job_id or row.key != key:
        raise ApiError(404, f"no open multipart upload {upload_id[:64]} for this key; start one")
    return row.backend_id, row


async def _bucket_location(
    request: web.Request, artifacts: Artifacts, scope: UploadScope, key: str
) -> str | None:
    """Where a bucket store wants this PUT's bytes (a presigned URL); None when they come
    through the orchestrator (the embedded store, or a checkpoint's manifest)."""
    store = artifacts.store
    if not store.presigns:
        return None
    if "uploadId" in request.query:
        backend_id, _ = await _multipart(artifacts, scope, key, request.query["uploadId"])
        return store.presign_part(scope.job_id, key, backend_id, _part_number(request))
    if is_manifest(key):
        return None
    return store.presign_put(scope.job_id, key, Checks.from_headers(request.headers))


async def redirect_before_the_body(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue``: with a bucket store a PUT is answered 307 before the
    client sends a byte of its body, so the bytes cross the network once, to the bucket.
    Otherwise (and on any error, which the handler then answers) 100 Continue."""
    artifacts = request.app.get(keys.ARTIFACTS)
    try:
        admit_credential(request, "upload", _upload_token_hash(request))
    except ApiError as throttled:  # answered before the body, and before any lookup
        return error_response(throttled.status, throttled.detail, throttled.headers)
    if artifacts is not None and artifacts.store.presigns:
        with contextlib.suppress(Exception):
            scope = await artifacts.scope_for(request.headers.get(UPLOAD_TOKEN_HEADER))
            location = await _bucket_location(request, artifacts, scope, _key(request))
            if location is not None:
                return _redirect(location)
    if request.version == HttpVersion11 and request.headers.get("Expect", "").lower() == (
        "100-continue"
    ):
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
    return None


@routes.route(
    "PUT",
    _OBJECT,
    include_in_schema=False,
    auth="upload",
    expect_handler=redirect_before_the_body,
)
async def artifact_put(request: web.Request) -> web.StreamResponse:
    artifacts, scope = await _scope(request)
    key = _key(request)
    checks = Checks.from_headers(request.headers)
    store = artifacts.store
    location = await _bucket_location(request, artifacts, scope, key)
    if location is not None:
        return _redirect(location)
    # Past here the bytes are stored by the orchestrator: on its disk, unless a bucket.
    if not store.presigns:  # refused at once when its declared size cannot fit; its bytes
        # are also counted as they come (_bytes_in), which at worst asks the disk sooner
        check_disk(request, "artifact bytes", stored_bytes=request.content_length or 0)
    if "uploadId" in request.query:
        await _multipart(artifacts, scope, key, request.query["uploadId"])
        number = _part_number(request)
        part = await store.put_part(request.query["uploadId"], number, _bytes_in(request), checks)
        return web.json_response({"etag": part.etag}, headers={"ETag": f'"{part.etag}"'})
    if is_manifest(key):
        data = await read_body(request, MAX_MANIFEST_BYTES)
        async with artifacts.writing(scope.job_id, key):
            row = await artifacts.put_manifest(scope, key, data, request.remote)
    else:
        async with artifacts.writing(scope.job_id, key):
            obj = await store.put(scope.job_id, key, _bytes_in(request), checks)
            row = await artifacts.stored(scope, key, obj, request.remote)
    body = {"key": row.key, "size": row.size, "sha256": row.sha256}
    return web.json_response(body, headers={"ETag": f'"{row.sha256}"'})


@routes.route("POST", _OBJECT, include_in_schema=False, auth="upload")
async def artifact_multipart(request: web.Request) -> web.StreamResponse:
    artifacts, scope = await _scope(request)
    key = _key(request)
    store = artifacts.store
    if not store.presigns:  # starting an upload, or assembling its parts into the object
        check_disk(request, "artifact bytes", stored_bytes=0)
    if "uploads" in request.query:
        if is_manifest(key):
            raise ApiError(400, "send a manifest in one PUT, not in parts")
        upload_id = await artifacts.start_multipart(scope, key)
        return web.json_response({"upload_id": upload_id, "part_size": PART_BYTES})
    if "uploadId" not in request.query:
        raise ApiError(
            400, "POST ?uploads starts a multipart upload; POST ?uploadId=U completes it"
        )
    upload_id = request.query["uploadId"]
    backend_id, _ = await _multipart(artifacts, scope, key, upload_id)
    if not store.presigns:  # assembling copies every part into the object first
        check_disk(request, "artifact bytes", stored_bytes=await store.parts_on_disk(upload_id))
    body = await parse_body(request, CompleteMultipart)
    parts = sorted((p.part_number, p.etag) for p in body.parts)
    async with artifacts.writing(scope.job_id, key):
        obj = await store.complete_multipart(scope.job_id, key, upload_id, backend_id, parts)
        await artifacts.records.drop_multipart(upload_id)
        row = await artifacts.stored(scope, key, obj, request.remote)
    return web.json_response({"key": row.key, "size": row.size, "sha256": row.sha256})


@routes.route("DELETE", _OBJECT, include_in_schema=False, auth="upload")
async def artifact_abort(request: web.Request) -> web.StreamResponse:
    artifacts, scope = await _scope(request)
    key = _key(request)
    if "uploadId" not in request.query:
        raise ApiError(
            400, "workers cannot delete stored objects; DELETE ?uploadId=U aborts an upload"
        )
    upload_id = request.query["uploadId"]
    backend_id, _ = await _multipart(artifacts, scope, key, upload_id)
    await artifacts.store.abort_multipart(scope.job_id, key, upload_id, backend_id)
    await artifacts.records.drop_multipart(upload_id)
    return web.json_response({"aborted": True, "upload_id": upload_id})


@routes.route("GET", _OBJECT, include_in_schema=False, auth="upload")
async def artifact_get(request: web.Request) -> web.StreamResponse:
    artifacts, scope = await _scope(request)
    key = _key(request)
    store = artifacts.store
    if "uploadId" in request.query:
        upload_id = request.query["uploadId"]
        backend_id, _ = await _multipart(artifacts, scope, key, upload_id)
        parts = await store.list_parts(scope.job_id, key, upload_id, backend_id)
        listed = [{"part_number": p.number, "etag": p.etag, "size": p.size} for p in parts]
        return web.json_response({"upload_id": upload_id, "part_size": PART_BYTES, "parts": listed})
    return await serve_object(request, artifacts, scope.job_id, key, scope.actor)


@routes.route("GET", _BUCKET, include_in_schema=False, auth="upload")
async def artifact_list(request: web.Request) -> web.StreamResponse:
    artifacts, scope = await _scope(request)
    prefix = check_prefix(request.query.get("prefix", ""))
    await artifacts.sync_bucket(scope.job_id)
    rows = await artifacts.records.objects(scope.job_id, prefix)
    objects = [{"key": r.key, "size": r.size, "sha256": r.sha256} for r in rows]
    return web.json_response({"objects": objects})


async def stored_row(artifacts: Artifacts, job_id: str, key: str) -> ArtifactRow:
    """The object's record; 404 when none (a bucket is listed again first, since a
    trainer may have written there directly)."""
    row = await artifacts.records.get(job_id, key)
    if row is None and artifacts.store.presigns:
        await artifacts.sync_bucket(job_id)
        row = await artifacts.records.get(job_id, key)
    if row is None:
        raise ApiError(404, f"artifact not found: {key}")
    return row


class HeldFileResponse(web.FileResponse):
    """A file sent while its principal's credential holds (http/principal_streams.py):
    revoking the token or disabling its user cuts a download under way, as it ends an
    event feed. Before, a download ran to its end after the revoke."""

    def __init__(self, path: Path, principal: ApiPrincipal, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self._principal = principal

    async def prepare(self, request: BaseRequest) -> AbstractStreamWriter | None:
        def cut() -> None:
            if request.transport is not None:
                request.transport.abort()

        assert isinstance(request, web.Request)
        with held_stream(request, self._principal, cut) as held:
            if held.ended:  # revoked between the lookup and now
                cut()
                return None
            return await super().prepare(request)


async def serve_object(
    request: web.Request,
    artifacts: Artifacts,
    job_id: str,
    key: str,
    actor: str,
    principal: ApiPrincipal | None = None,
) -> web.StreamResponse:
    """The bytes of a stored object (HTTP Range through FileResponse; 416 for a range no
    byte satisfies, which is no download), or a redirect to a presigned URL when a bucket
    holds it. With ``principal`` the bytes are sent only while its credential holds."""
    row = await stored_row(artifacts, job_id, key)
    store = artifacts.store
    if store.presigns:
        await artifacts.downloaded(job_id, key, actor, request.remote)
        return _redirect(store.presign_get(job_id, key))
    path = store.local_path(job_id, key)
    if path is None or not path.is_file():
        raise ApiError(404, f"artifact not found: {key} (its record has no bytes)")
    found = path.stat()
    refuse_unsatisfiable(request, found.st_size, found.st_mtime)
    await artifacts.downloaded(job_id, key, actor, request.remote)
    headers = {"Content-Type": "application/octet-stream"}
    if row.sha256:
        headers["X-Artifact-SHA256"] = row.sha256
    if principal is not None:
        return HeldFileResponse(path, principal, headers=headers)
    return web.FileResponse(path, headers=headers)
