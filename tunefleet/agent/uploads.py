"""The artifact store's worker-facing HTTP API, from the worker's side (docs/job-contract.md).

Files go up and come down streamed in fixed-size chunks, so a multi-GB checkpoint never
sits in memory: a single PUT for small files, S3-style multipart (resumable: the parts
already stored survive an outage) for large ones. Every object is checked against its
sha256. A bucket-backed store answers 307 with a presigned URL; the redirect is
followed by hand, with the body re-read from disk and without the upload token (it is
for the orchestrator, not the bucket).

Errors are two kinds: ``StoreUnreachable`` (connection lost, 5xx, a checksum that did
not match): try again later; ``UploadRefused`` (4xx, 507 no space): trying again
cannot help, ``detail`` says why. Both messages are safe to show: no token in them.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urljoin

import aiohttp
import structlog

from tunefleet import __version__
from tunefleet.agent.backoff import Backoff
from tunefleet.agent.client import read_body
from tunefleet.errors import TunefleetError

log = structlog.get_logger(__name__)

CHUNK_BYTES = 1024 * 1024
# Above this size a file goes up in parts: one lost connection costs a part, not the file.
MULTIPART_THRESHOLD = 64 * 1024 * 1024
DEFAULT_BUCKET = "tunefleet"
_MAX_REDIRECTS = 3
T = TypeVar("T")


class ArtifactError(TunefleetError):
    """Base of the artifact store's errors."""


class StoreUnreachable(ArtifactError):
    """The store cannot be reached, answered 5xx, or the bytes did not check out: retry."""


class UploadRefused(ArtifactError):
    """The store refused the request for good (a 4xx, or 507: out of disk space)."""

    def __init__(self, status: int, detail: str, what: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"{what} refused with HTTP {status}: {detail}")


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str
    size: int
    sha256: str


@dataclass(slots=True)
class _Multipart:
    """A multipart upload in progress, kept so a retry continues it."""

    upload_id: str
    part_size: int
    identity: tuple[int, int]  # (size, mtime_ns) of the file it uploads
    etags: dict[int, str] = field(default_factory=dict)
    digest: Any = field(default_factory=hashlib.sha256)  # of the bytes [0, hashed_to)
    hashed_to: int = 0


def file_sha256(path: Path, chunk_bytes: int = CHUNK_BYTES) -> str:
    """The file's sha256, read in chunks (call it in a thread: it blocks)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


async def retrying(
    operation: Callable[[], Awaitable[T]],
    backoff: Backoff,
    *,
    what: str,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run ``operation`` until it succeeds, waiting out ``StoreUnreachable`` with backoff
    (an outage of the orchestrator, as the agent's reports do); ``UploadRefused`` and
    cancellation end it."""
    while True:
        try:
            result = await operation()
        except StoreUnreachable as error:
            delay = backoff.next_delay()
            log.info("artifact transfer failed; retrying", what=what, error=str(error),
                     retry_in_s=round(delay, 2))  # fmt: skip
            await sleep(delay)
            continue
        backoff.reset()
        return result


class ArtifactClient:
    """One job attempt's access to the store: ``endpoint`` and ``token`` come from its
    job_submit (``upload_endpoint``, ``upload_token``)."""

    def __init__(
        self,
        endpoint: str,
        token: str,
        *,
        bucket: str = DEFAULT_BUCKET,
        tls: ssl.SSLContext | bool = True,
        multipart_threshold: int = MULTIPART_THRESHOLD,
        chunk_bytes: int = CHUNK_BYTES,
        request_timeout_s: float = 300.0,
        connect_timeout_s: float = 10.0,
        fallback_endpoint: str | None = None,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        # The same endpoint through the URL the agent reaches the orchestrator by: used
        # when the advertised one cannot be connected to from here (a wrong --advertise-url).
        fallback = (fallback_endpoint or "").rstrip("/")
        self._fallback = fallback if fallback and fallback != self.endpoint else None
        self.bucket = bucket
        self.multipart_threshold = multipart_threshold
        self.chunk_bytes = chunk_bytes
        # A part of many MB on a slow link: bounded per read, not per request.
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_s, sock_read=request_timeout_s
        )
        self._headers = {"X-Upload-Token": token, "User-Agent": f"tunefleet-agent/{__version__}"}
        self._tls = tls
        self._session: aiohttp.ClientSession | None = None
        self._multiparts: dict[str, _Multipart] = {}
        self.bytes_sent = 0
        self.bytes_received = 0

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- uploads ------------------------------------------------------------------------

    async def put_bytes(self, key: str, data: bytes) -> StoredObject:
        """A small object (a manifest) from memory."""
        sha = hashlib.sha256(data).hexdigest()
        _, body, _ = await self._send("PUT", self._url(key), f"upload of {key}", data=data)
        return self._stored(key, len(data), sha, body)

    async def put_file(self, key: str, path: Path) -> StoredObject:
        """Store the file at ``key``, hashing it as it is read (one pass over the disk);
        a retry of a large file continues its multipart upload where the last one stopped."""
        stat = await asyncio.to_thread(path.stat)
        if stat.st_size > self.multipart_threshold:
            stored = await self._put_multipart(key, path, stat)
        else:
            digest = [hashlib.sha256()]
            _, body, _ = await self._send(
                "PUT", self._url(key), f"upload of {key}",
                path=path, length=stat.st_size, digest=digest,
            )  # fmt: skip
            stored = self._stored(key, stat.st_size, digest[0].hexdigest(), body)
        after = await asyncio.to_thread(path.stat)
        if (after.st_size, after.st_mtime_ns) != (stat.st_size, stat.st_mtime_ns):
            self._multiparts.pop(key, None)
            raise StoreUnreachable(f"{path} changed while it was uploaded; uploading it again")
        return stored

    async def _put_multipart(self, key: str, path: Path, stat: os.stat_result) -> StoredObject:
        identity = (stat.st_size, stat.st_mtime_ns)
        upload = self._multiparts.get(key)
        if upload is not None and upload.identity != identity:
            await self._abort(key, upload)
            upload = None
        if upload is None:
            upload = await self._start_multipart(key, identity)
        else:
            upload.etags = await self._stored_parts(key, upload)
        size = stat.st_size
        count = max(1, -(-size // upload.part_size))
        for number in range(1, count + 1):
            offset = (number - 1) * upload.part_size
            length = min(upload.part_size, size - offset)
            if number in upload.etags:
                if upload.hashed_to == offset:  # stored by a try whose answer was lost
                    await asyncio.to_thread(_hash_range, path, offset, length, upload.digest)
                    upload.hashed_to += length
                continue
            # The whole-file digest follows the parts in order; a failed part leaves it as
            # it was (the part's bytes go into a copy, kept only once the part is stored).
            in_order = upload.hashed_to == offset
            digest = [upload.digest] if in_order else None
            query = f"?partNumber={number}&uploadId={quote(upload.upload_id, safe='')}"
            _, body, headers = await self._send(
                "PUT", self._url(key) + query, f"part {number} of {key}",
                path=path, offset=offset, length=length, digest=digest,
            )  # fmt: skip
            etag = body.get("etag") if isinstance(body, dict) else None
            upload.etags[number] = str(etag or headers.get("ETag", "")).strip()
            if digest is not None:
                upload.digest, upload.hashed_to = digest[0], offset + length
        if upload.hashed_to != size:  # parts stored by an earlier try of another process
            upload.digest = await asyncio.to_thread(_digest_of, path)
            upload.hashed_to = size
        sha = upload.digest.hexdigest()
        parts = [{"part_number": n, "etag": upload.etags[n]} for n in range(1, count + 1)]
        query = f"?uploadId={quote(upload.upload_id, safe='')}"
        try:
            _, body, _ = await self._send(
                "POST", self._url(key) + query, f"completing {key}", json_body={"parts": parts}
            )
        except UploadRefused as error:
            if error.status == 404:  # the upload expired meanwhile: start over next time
                self._multiparts.pop(key, None)
                raise StoreUnreachable(f"multipart upload of {key} was lost; restarting") from None
            raise
        self._multiparts.pop(key, None)
        return self._stored(key, size, sha, body)

    async def _start_multipart(self, key: str, identity: tuple[int, int]) -> _Multipart:
        _, body, _ = await self._send("POST", self._url(key) + "?uploads", f"starting {key}")
        if not isinstance(body, dict) or not body.get("upload_id"):
            raise StoreUnreachable(f"the store did not start a multipart upload of {key}: {body}")
        part_size = int(body.get("part_size") or 64 * 1024 * 1024)
        upload = _Multipart(str(body["upload_id"]), max(part_size, 1), identity)
        self._multiparts[key] = upload
        return upload

    async def _stored_parts(self, key: str, upload: _Multipart) -> dict[int, str]:
        """The parts the store already has (after an outage), so only the rest go again."""
        query = f"?uploadId={quote(upload.upload_id, safe='')}"
        try:
            _, body, _ = await self._send("GET", self._url(key) + query, f"parts of {key}")
        except UploadRefused as error:
            if error.status != 404:
                raise
            fresh = await self._start_multipart(key, upload.identity)
            upload.upload_id, upload.part_size = fresh.upload_id, fresh.part_size
            upload.digest, upload.hashed_to = hashlib.sha256(), 0
            self._multiparts[key] = upload
            return {}
        parts = body.get("parts") if isinstance(body, dict) else None
        stored: dict[int, str] = {}
        for part in parts if isinstance(parts, list) else []:
            number = part.get("part_number", part.get("PartNumber"))
            etag = part.get("etag", part.get("ETag"))
            if isinstance(number, int) and etag is not None:
                stored[number] = str(etag)
        return stored

    async def _abort(self, key: str, upload: _Multipart) -> None:
        self._multiparts.pop(key, None)
        query = f"?uploadId={quote(upload.upload_id, safe='')}"
        try:
            await self._send("DELETE", self._url(key) + query, f"aborting {key}")
        except ArtifactError as error:
            log.info("could not abort a multipart upload", key=key, error=str(error))

    # --- downloads ----------------------------------------------------------------------

    async def list_objects(self, prefix: str) -> list[StoredObject]:
        url = f"{self.endpoint}/{self.bucket}?prefix={quote(prefix, safe='')}"
        _, body, _ = await self._send("GET", url, f"listing {prefix}")
        objects = body.get("objects") if isinstance(body, dict) else None
        if not isinstance(objects, list):
            raise StoreUnreachable(f"the store's listing of {prefix} is not one: {body!r:.200}")
        return [
            StoredObject(str(o["key"]), int(o["size"]), str(o.get("sha256") or ""))
            for o in objects
            if isinstance(o, dict) and "key" in o and "size" in o
        ]

    async def download(self, item: StoredObject, dest: Path) -> None:
        """Stream ``item`` into ``dest`` (through ``dest.part``; a retry continues it with a
        Range request), then check its size and sha256 before it takes its name."""
        partial = dest.with_name(dest.name + ".part")
        dest.parent.mkdir(parents=True, exist_ok=True)
        have = partial.stat().st_size if partial.exists() else 0
        if have > item.size:
            partial.unlink()
            have = 0
        digest = await asyncio.to_thread(_digest_of, partial) if have else hashlib.sha256()
        if have < item.size:
            headers = {"Range": f"bytes={have}-"} if have else {}
            async with self._open("GET", self._url(item.key), headers) as response:
                if response.status != 206:
                    digest, have = hashlib.sha256(), 0  # the whole object came back
                handle = await asyncio.to_thread(partial.open, "ab" if have else "wb")
                try:
                    async for chunk in response.content.iter_chunked(self.chunk_bytes):
                        await asyncio.to_thread(_write_hashing, handle, chunk, digest)
                        self.bytes_received += len(chunk)
                except (aiohttp.ClientError, TimeoutError) as error:
                    why = f"download of {item.key} interrupted: {_describe(error)}"
                    raise StoreUnreachable(why) from None
                finally:
                    await asyncio.to_thread(handle.close)
        size = partial.stat().st_size
        if size != item.size or (item.sha256 and digest.hexdigest() != item.sha256):
            partial.unlink(missing_ok=True)
            raise StoreUnreachable(
                f"{item.key} came down as {size} bytes with a different checksum; fetching again"
            )
        os.replace(partial, dest)

    # --- plumbing -----------------------------------------------------------------------

    def _url(self, key: str) -> str:
        return f"{self.endpoint}/{self.bucket}/{quote(key)}"

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._tls))
        return self._session

    def _fall_back_from(self, url: str, error: BaseException) -> None:
        """The advertised endpoint cannot be connected to: the next try goes through the
        orchestrator URL this agent uses (it works: the agent got the job through it)."""
        if not (self._fallback and url.startswith(self.endpoint + "/")):
            return
        if not isinstance(error, aiohttp.ClientConnectorError | TimeoutError):
            return
        log.warning(
            "cannot connect to the advertised upload endpoint; using the orchestrator URL",
            advertised=self.endpoint,
            using=self._fallback,
            error=_describe(error),
        )
        self.endpoint, self._fallback = self._fallback, None

    def _stored(self, key: str, size: int, sha: str, body: Any) -> StoredObject:
        their = body.get("sha256") if isinstance(body, dict) else None
        if isinstance(their, str) and their and their != sha:
            raise StoreUnreachable(f"{key} arrived with a different checksum; uploading it again")
        return StoredObject(key, size, sha)

    async def _send(
        self,
        method: str,
        url: str,
        what: str,
        *,
        data: bytes | None = None,
        json_body: Any = None,
        path: Path | None = None,
        offset: int = 0,
        length: int = 0,
        digest: list[Any] | None = None,
    ) -> tuple[int, Any, Mapping[str, str]]:
        """One request, its body re-made for each redirect (a stream cannot be replayed).
        A file body's bytes go into ``digest[0]`` (a hashlib object) as they are read."""
        headers = dict(self._headers)
        start = digest[0].copy() if digest is not None else None
        for _ in range(_MAX_REDIRECTS + 1):
            body: Any = data
            if path is not None:
                hasher = None
                if digest is not None and start is not None:
                    digest[0] = hasher = start.copy()  # a redirect sends the bytes again
                body = self._chunks(path, offset, length, hasher)
                headers["Content-Length"] = str(length)
            try:
                async with self._client().request(
                    method, url, data=body, json=json_body, headers=headers,
                    timeout=self._timeout, allow_redirects=False,
                ) as response:  # fmt: skip
                    payload = await read_body(response)
                    # Case-insensitive: a bucket may spell it "etag" (moto does).
                    status, reply_headers = response.status, response.headers.copy()
            except (aiohttp.ClientError, TimeoutError, OSError) as error:
                self._fall_back_from(url, error)
                raise StoreUnreachable(f"{what} failed: {_describe(error)}") from None
            if status in (301, 302, 303, 307, 308) and "Location" in reply_headers:
                url = urljoin(url, reply_headers["Location"])
                # A presigned URL carries its own authority; the token stays with us.
                headers = {"User-Agent": self._headers["User-Agent"]}
                if path is not None:
                    headers["Content-Length"] = str(length)
                continue
            _raise_for_status(status, payload, what)
            return status, payload, reply_headers
        raise StoreUnreachable(f"{what}: too many redirects")

    def _open(self, method: str, url: str, extra: dict[str, str]) -> _Download:
        return _Download(self, method, url, extra)

    async def _chunks(
        self, path: Path, offset: int, length: int, digest: Any = None
    ) -> AsyncIterator[bytes]:
        handle = await asyncio.to_thread(path.open, "rb")
        try:
            await asyncio.to_thread(handle.seek, offset)
            left = length
            while left > 0:
                # Read and hash in the thread: sha256 lets go of the GIL for large buffers.
                size = min(self.chunk_bytes, left)
                chunk = await asyncio.to_thread(_read_hashing, handle, size, digest)
                if not chunk:
                    raise StoreUnreachable(f"{path} shrank while it was uploaded")
                left -= len(chunk)
                self.bytes_sent += len(chunk)
                yield chunk
        finally:
            await asyncio.to_thread(handle.close)


class _Download:
    """``async with``: a GET whose redirects are followed without the token."""

    def __init__(self, client: ArtifactClient, method: str, url: str, extra: dict[str, str]):
        self.client, self.method, self.url, self.extra = client, method, url, extra
        self._response: aiohttp.ClientResponse | None = None

    async def __aenter__(self) -> aiohttp.ClientResponse:
        headers = {**self.client._headers, **self.extra}
        url = self.url
        for _ in range(_MAX_REDIRECTS + 1):
            try:
                response = await self.client._client().request(
                    self.method, url, headers=headers, timeout=self.client._timeout,
                    allow_redirects=False,
                )  # fmt: skip
            except (aiohttp.ClientError, TimeoutError, OSError) as error:
                self.client._fall_back_from(url, error)
                # Not the URL: after a redirect it is a presigned one, a credential.
                what = f"download of {self.url.split('?', 1)[0].rsplit('/', 1)[-1]}"
                raise StoreUnreachable(f"{what} failed: {_describe(error)}") from None
            if response.status in (301, 302, 303, 307, 308) and "Location" in response.headers:
                url = urljoin(url, response.headers["Location"])
                response.release()
                headers = {"User-Agent": self.client._headers["User-Agent"], **self.extra}
                continue
            if response.status >= 400:
                payload = await read_body(response)
                response.release()
                _raise_for_status(response.status, payload, "download")
            self._response = response
            return response
        raise StoreUnreachable("download: too many redirects")

    async def __aexit__(self, *exc: object) -> None:
        if self._response is not None:
            self._response.release()


def _read_hashing(handle: Any, size: int, digest: Any) -> bytes:
    chunk: bytes = handle.read(size)
    if digest is not None:
        digest.update(chunk)
    return chunk


def _write_hashing(handle: Any, chunk: bytes, digest: Any) -> None:
    handle.write(chunk)
    digest.update(chunk)


def _hash_range(path: Path, offset: int, length: int, digest: Any) -> None:
    with path.open("rb") as handle:
        handle.seek(offset)
        left = length
        while left > 0 and (chunk := handle.read(min(CHUNK_BYTES, left))):
            digest.update(chunk)
            left -= len(chunk)


def _digest_of(path: Path) -> Any:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest


def _describe(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    return str(error) or type(error).__name__


def _raise_for_status(status: int, payload: Any, what: str) -> None:
    if status < 400:
        return
    detail = payload.get("detail") if isinstance(payload, dict) else None
    if not isinstance(detail, str):
        detail = str(payload)[:200] if payload else "(no detail)"
    if (status >= 500 and status != 507) or status in (408, 429):
        raise StoreUnreachable(f"{what} failed: the store answered {status}: {detail}")
    raise UploadRefused(status, detail, what)
