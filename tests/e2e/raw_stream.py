"""A bare-socket worker for end-to-end tests: it registers, opens its SSE stream, reads
events, and can close the socket at any moment without acknowledging anything, as a
machine that died or a load balancer that dropped the connection would."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RawStreamWorker:
    url: str  # http://127.0.0.1:PORT
    token: str
    worker_id: str
    name: str = "raw"
    labels: dict[str, str] = field(default_factory=dict)
    sock: socket.socket | None = None
    _buffer: bytes = b""
    last_event_id: int | None = None

    def register(self, current_job_id: str | None = None) -> dict[str, Any]:
        body = {
            "name": self.name,
            "persistent": True,
            "labels": self.labels,
            "current_job_id": current_job_id,
            "gpu_info": {"count": 0},
        }
        return self._post("/api/workers/register", body)

    def report(self, job_id: str, status: str, attempt: int | None = None) -> int:
        """POST a status report; the HTTP status code (409 and 403 are answers, not errors)."""
        body: dict[str, Any] = {"status": status}
        if attempt is not None:
            body["attempt"] = attempt
        try:
            self._post(f"/api/workers/job/{job_id}/status", body)
        except urllib.error.HTTPError as error:
            return int(error.code)
        return 200

    def heartbeat(self, current_job_id: str | None = None) -> None:
        body = {"worker_id": self.worker_id, "status": "idle", "current_job_id": current_job_id}
        self._post("/api/workers/heartbeat", body)

    def open_stream(self, last_event_id: int | None = None) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        extra = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id is not None else ""
        request = (
            f"GET /api/workers/stream?worker_id={self.worker_id} HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\nX-Worker-Token: {self.token}\r\n"
            f"Accept: text/event-stream\r\n{extra}\r\n"
        )
        self.sock.sendall(request.encode())
        self._buffer = b""
        head = self._read_until(b"\r\n\r\n", timeout_s=10)
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            raise AssertionError(f"stream refused: {head!r}")

    def next_event(self, timeout_s: float = 10.0) -> dict[str, Any] | None:
        """The next non-ping event's data, or None when none came within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                block = self._read_until(b"\n\n", timeout_s=left)
            except TimeoutError:
                return None
            data = None
            for line in block.decode().splitlines():
                if line.startswith("data: "):
                    data = json.loads(line[len("data: ") :])
                elif line.startswith("id: "):
                    self.last_event_id = int(line[len("id: ") :])
            if data is not None and data.get("type") != "ping":
                return data  # type: ignore[no-any-return]

    def wait_event(self, type_: str, timeout_s: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            event = self.next_event(left)
            if event is not None and event.get("type") == type_:
                return event
        raise AssertionError(f"no {type_} event within {timeout_s:g} s")

    def close(self) -> None:
        """Drop the connection at once, acknowledging nothing."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    # --- plumbing -------------------------------------------------------------------

    def _read_until(self, marker: bytes, timeout_s: float) -> bytes:
        assert self.sock is not None, "open_stream() first"
        deadline = time.monotonic() + timeout_s
        while marker not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                raise TimeoutError from None
            if not chunk:
                raise ConnectionError("the orchestrator closed the stream")
            # Chunked transfer framing ("1a\r\n" … "\r\n") is dropped line by line below.
            self._buffer += chunk
        block, self._buffer = self._buffer.split(marker, 1)
        return _strip_chunk_sizes(block)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), method="POST"
        )
        request.add_header("X-Worker-Token", self.token)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")  # type: ignore[no-any-return]


def _strip_chunk_sizes(block: bytes) -> bytes:
    lines = block.replace(b"\r\n", b"\n").split(b"\n")
    return b"\n".join(line for line in lines if not _is_chunk_size(line))


def _is_chunk_size(line: bytes) -> bool:
    return 0 < len(line) <= 8 and all(c in b"0123456789abcdefABCDEF" for c in line)
