"""An in-process artifact store that speaks the worker-facing contract (ARTIFACTS-CONTRACT):
PUT objects, S3-style multipart, listing by prefix, GET with Range, optional 307
redirects to "presigned" URLs, and faults to inject (5xx, dropped connections, 507).

Objects live on disk under ``root`` (streamed in and out, as the real store does), so a
multi-GB test file never sits in the test's memory either.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

TOKEN = "ut_fake-upload-token-0123456789"
CHUNK = 1024 * 1024


@dataclass
class FakeStore:
    root: Path
    token: str = TOKEN
    part_size: int = 5 * 1024 * 1024
    redirect: bool = False  # answer uploads and downloads with 307 to a "presigned" URL
    fail_next: int = 0  # the next N requests get a 503
    drop_next: int = 0  # the next N PUTs of bytes lose their connection half-way
    refuse_status: int | None = None  # every write answers this (e.g. 507)
    requests: list[tuple[str, str]] = field(default_factory=list)
    max_body_chunk: int = 0
    _uploads: dict[str, dict[int, Path]] = field(default_factory=dict)
    _presigned: dict[str, str] = field(default_factory=dict)
    _sha: dict[str, tuple[tuple[int, int], str]] = field(default_factory=dict)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1024**4)
        app.router.add_route("*", "/api/artifacts/{bucket}", self._bucket)
        app.router.add_route("*", "/api/artifacts/{bucket}/{key:.+}", self._object)
        app.router.add_route("*", "/presigned/{ticket}", self._presigned_route)
        return app

    # --- what tests read -------------------------------------------------------------------

    def path(self, key: str) -> Path:
        return self.root / "objects" / key

    def stored_keys(self) -> list[str]:
        base = self.root / "objects"
        return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())

    def sha256(self, key: str) -> str:
        path = self.path(key)
        stat = path.stat()
        known = self._sha.get(key)
        if known is None or known[0] != (stat.st_size, stat.st_mtime_ns):
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                while chunk := handle.read(CHUNK):
                    digest.update(chunk)
            known = ((stat.st_size, stat.st_mtime_ns), digest.hexdigest())
            self._sha[key] = known
        return known[1]

    # --- routes ---------------------------------------------------------------------------

    async def _bucket(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._check(request)) is not None:
            return refused
        prefix = request.query.get("prefix", "")
        objects = [
            {"key": k, "size": self.path(k).stat().st_size, "sha256": self.sha256(k)}
            for k in self.stored_keys()
            if k.startswith(prefix)
        ]
        return web.json_response({"objects": objects})

    async def _object(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._check(request)) is not None:
            return refused
        key = request.match_info["key"]
        q = request.query
        if request.method == "POST" and "uploads" in q:
            upload_id = secrets.token_hex(8)
            self._uploads[upload_id] = {}
            return web.json_response({"upload_id": upload_id, "part_size": self.part_size})
        if "uploadId" in q:
            return await self._multipart(request, key, q["uploadId"])
        if request.method == "PUT":
            if self.refuse_status is not None:
                return _json_error(self.refuse_status, "no space left on the store")
            if self.redirect:
                return self._redirect(request, key)
            return await self._receive(request, self.path(key), key)
        if request.method == "GET":
            if self.redirect:
                return self._redirect(request, key)
            return await self._send(request, self.path(key))
        return _json_error(405, "method not allowed")

    async def _multipart(self, request: web.Request, key: str, upload_id: str) -> web.Response:
        parts = self._uploads.get(upload_id)
        if parts is None:
            return _json_error(404, "no such upload")
        if request.method == "PUT":
            number = int(request.query["partNumber"])
            target = self.root / "parts" / upload_id / str(number)
            stored = await self._receive(request, target, key, part=True)
            parts[number] = target
            return stored
        if request.method == "GET":
            listed = [
                {"part_number": n, "etag": _etag(p), "size": p.stat().st_size}
                for n, p in sorted(parts.items())
            ]
            return web.json_response({"parts": listed})
        if request.method == "POST":
            wanted = (await request.json())["parts"]
            dest = self.path(key)
            dest.parent.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256()
            with dest.open("wb") as out:
                for part in wanted:
                    source = parts[part["part_number"]]
                    if part["etag"] != _etag(source):
                        return _json_error(400, "part etag mismatch")
                    with source.open("rb") as handle:
                        while chunk := handle.read(CHUNK):
                            digest.update(chunk)
                            out.write(chunk)
            del self._uploads[upload_id]
            size = dest.stat().st_size
            return web.json_response({"key": key, "size": size, "sha256": digest.hexdigest()})
        if request.method == "DELETE":
            del self._uploads[upload_id]
            return web.json_response({})
        return _json_error(405, "method not allowed")

    async def _presigned_route(self, request: web.Request) -> web.StreamResponse:
        if "X-Upload-Token" in request.headers:
            return _json_error(400, "a presigned URL must not carry the upload token")
        key = self._presigned.pop(request.match_info["ticket"], None)
        if key is None:
            return _json_error(403, "unknown ticket")
        if request.method == "PUT":
            response = await self._receive(request, self.path(key), key)
            response.headers["ETag"] = '"s3-etag"'
            return response
        return await self._send(request, self.path(key))

    # --- plumbing -------------------------------------------------------------------------

    def _check(self, request: web.Request) -> web.Response | None:
        self.requests.append((request.method, request.path_qs))
        if self.fail_next > 0:
            self.fail_next -= 1
            return _json_error(503, "store temporarily unavailable")
        if request.headers.get("X-Upload-Token") != self.token:
            return _json_error(401, "upload token refused: the job attempt ended")
        return None

    def _redirect(self, request: web.Request, key: str) -> web.Response:
        ticket = secrets.token_hex(8)
        self._presigned[ticket] = key
        return web.Response(status=307, headers={"Location": f"/presigned/{ticket}"})

    async def _receive(
        self, request: web.Request, dest: Path, key: str, part: bool = False
    ) -> web.Response:
        if request.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return _json_error(411, "Content-Length required (S3 refuses chunked uploads)")
        expected = int(request.headers["Content-Length"])
        dest.parent.mkdir(parents=True, exist_ok=True)
        scratch = dest.with_name(dest.name + ".incoming")
        digest = hashlib.sha256()
        received = 0
        drop = self.drop_next > 0
        with scratch.open("wb") as out:
            async for chunk in request.content.iter_any():
                self.max_body_chunk = max(self.max_body_chunk, len(chunk))
                digest.update(chunk)
                out.write(chunk)
                received += len(chunk)
                if drop and received >= expected // 2:
                    self.drop_next -= 1
                    request.transport.close()  # type: ignore[union-attr]
                    return _json_error(400, "connection dropped")
        if received != expected:
            return _json_error(400, "body shorter than Content-Length")
        scratch.replace(dest)
        if part:
            return web.json_response({"etag": _etag(dest)})
        return web.json_response({"key": key, "size": received, "sha256": digest.hexdigest()})

    async def _send(self, request: web.Request, path: Path) -> web.StreamResponse:
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            return _json_error(404, "no such object")
        start = 0
        rng = request.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0])
        response = web.StreamResponse(status=206 if start else 200)
        response.content_length = size - start
        await response.prepare(request)
        with path.open("rb") as handle:
            handle.seek(start)
            while chunk := handle.read(CHUNK):
                await response.write(chunk)
        await response.write_eof()
        return response


def _etag(path: Path) -> str:
    stat = path.stat()
    return f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"'


def _json_error(status: int, detail: str) -> web.Response:
    return web.json_response({"detail": detail}, status=status)


async def start_fake_store(store: FakeStore) -> tuple[web.AppRunner, str]:
    """Serve ``store`` on a free loopback port; returns the runner and the upload endpoint."""
    runner = web.AppRunner(store.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/api/artifacts"


def manifest(store: FakeStore, key: str) -> dict[str, Any]:
    return json.loads(store.path(key).read_text())  # type: ignore[no-any-return]
