"""A test-only worker-protocol client for the in-process orchestrator (shared/PROTOCOL.md).

It speaks the wire protocol the way an agent does: JSON bodies with ``X-Worker-Token``,
and the SSE stream read as raw bytes and parsed here (not with tunefleet's own parser),
so framing mistakes on the server show up in the tests.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient

STREAM_TIMEOUT_S = 5.0
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SseFrame:
    """One event as it appeared on the wire: its field lines, in order, and raw bytes."""

    raw: bytes
    fields: tuple[tuple[str, str], ...]

    def values(self, name: str) -> list[str]:
        return [value for key, value in self.fields if key == name]

    @property
    def id(self) -> str | None:
        ids = self.values("id")
        return ids[-1] if ids else None

    @property
    def event(self) -> str | None:
        events = self.values("event")
        return events[-1] if events else None

    @property
    def data_lines(self) -> list[str]:
        return self.values("data")

    @property
    def data(self) -> dict[str, Any]:
        """The JSON of the frame's single ``data:`` line (more than one is a framing bug)."""
        lines = self.data_lines
        if len(lines) != 1:
            raise AssertionError(f"expected one data line, got {len(lines)}: {self.raw!r}")
        value = json.loads(lines[0])
        if not isinstance(value, dict):
            raise AssertionError(f"data is not a JSON object: {self.raw!r}")
        return value

    @property
    def type(self) -> str:
        return str(self.data.get("type"))


def split_frames(buffer: bytes) -> tuple[list[SseFrame], bytes]:
    """Complete frames in ``buffer`` and the unfinished rest. Lines end with CRLF, LF or CR."""
    text = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    frames: list[SseFrame] = []
    while b"\n\n" in text:
        block, text = text.split(b"\n\n", 1)
        if not block.strip():
            continue
        parsed: list[tuple[str, str]] = []
        for line in block.decode("utf-8").split("\n"):
            if line.startswith(":"):
                continue  # an SSE comment
            name, _, value = line.partition(":")
            parsed.append((name, value[1:] if value.startswith(" ") else value))
        frames.append(SseFrame(block, tuple(parsed)))
    return frames, text


@dataclass
class EventStream:
    """An open ``GET /api/workers/stream`` (or any SSE response) read frame by frame."""

    response: ClientResponse
    raw: bytearray = field(default_factory=bytearray)
    _pending: bytes = b""
    _frames: list[SseFrame] = field(default_factory=list)

    @property
    def status(self) -> int:
        return self.response.status

    async def next_frame(self, timeout_s: float = STREAM_TIMEOUT_S) -> SseFrame:
        deadline = time.monotonic() + timeout_s
        while not self._frames:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no SSE frame within {timeout_s} s; got {bytes(self.raw)!r}")
            try:
                chunk = await asyncio.wait_for(self.response.content.readany(), remaining)
            except TimeoutError:
                continue
            if not chunk:
                raise EOFError(f"stream ended; got {bytes(self.raw)!r}")
            self.raw += chunk
            frames, self._pending = split_frames(self._pending + chunk)
            self._frames.extend(frames)
        return self._frames.pop(0)

    async def next_event(
        self, timeout_s: float = STREAM_TIMEOUT_S, *, skip_pings: bool = True
    ) -> SseFrame:
        while True:
            frame = await self.next_frame(timeout_s)
            if skip_pings and frame.event == "ping":
                continue
            return frame

    async def expect(self, type_: str, timeout_s: float = STREAM_TIMEOUT_S) -> SseFrame:
        frame = await self.next_event(timeout_s)
        if frame.event != type_ or frame.type != type_:
            raise AssertionError(f"expected {type_}, got {frame.raw!r}")
        return frame

    async def expect_nothing(self, within_s: float = 0.2) -> None:
        """No event other than pings arrives within ``within_s`` (a short poll)."""
        try:
            frame = await self.next_event(within_s)
        except AssertionError:
            return
        raise AssertionError(f"unexpected event {frame.raw!r}")

    async def expect_closed(self, timeout_s: float = STREAM_TIMEOUT_S) -> None:
        """The server ends the stream (pings before the end are skipped)."""
        try:
            while True:
                frame = await self.next_frame(timeout_s)
                if frame.event != "ping":
                    raise AssertionError(f"expected the stream to close, got {frame.raw!r}")
        except EOFError:
            return

    def close(self) -> None:
        self.response.close()


class WorkerClient:
    """One agent: its token, its id once registered, and its open stream."""

    def __init__(self, client: TestClient, token: str, worker_id: str | None = None) -> None:
        self.client = client
        self.token = token
        self.worker_id = worker_id
        self.stream: EventStream | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Worker-Token": self.token}

    async def post(self, path: str, body: Any) -> ClientResponse:
        return await self.client.post(path, json=body, headers=self.headers)

    async def register(self, name: str = "gpu-worker-1", **fields: Any) -> dict[str, Any]:
        """SimpleTuner's agent's body by default: two A100s, no labels, no job."""
        body: dict[str, Any] = {
            "name": name,
            "gpu_info": {
                "name": "NVIDIA A100-SXM4-80GB",
                "vram_gb": 80,
                "count": 2,
                "driver": "12.4",
                "accelerator": "cuda",
            },
            "persistent": True,
            "current_job_id": None,
        }
        body.update(fields)
        resp = await self.post("/api/workers/register", body)
        data = await resp.json()
        if resp.status != 200:
            raise AssertionError(f"register failed: {resp.status} {data}")
        self.worker_id = data["worker_id"]
        return data

    async def open_stream(
        self, last_event_id: str | int | None = None, worker_id: str | None = None
    ) -> EventStream:
        headers = dict(self.headers)
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        resp = await self.client.get(
            "/api/workers/stream",
            params={"worker_id": worker_id or self.worker_id or ""},
            headers=headers,
        )
        stream = EventStream(resp)
        if resp.status == 200:
            self.stream = stream
        return stream

    async def connect(self, name: str = "gpu-worker-1", **fields: Any) -> EventStream:
        """Register and open the stream: an idle, schedulable worker."""
        await self.register(name, **fields)
        stream = await self.open_stream()
        if stream.status != 200:
            raise AssertionError(f"stream refused: {stream.status} {await stream.response.text()}")
        return stream

    async def heartbeat(self, **fields: Any) -> ClientResponse:
        body: dict[str, Any] = {"worker_id": self.worker_id, "status": "idle"}
        body.update(fields)
        return await self.post("/api/workers/heartbeat", body)

    async def report(
        self, job_id: str, status: str, error: str | None = None, **fields: Any
    ) -> ClientResponse:
        """SimpleTuner's agent's report body: ``status`` and ``error``."""
        body: dict[str, Any] = {"status": status, "error": error, **fields}
        return await self.post(f"/api/workers/job/{job_id}/status", body)

    async def send_logs(
        self, job_id: str, lines: list[str], attempt: int = 1, first_seq: int = 0
    ) -> ClientResponse:
        body = {
            "attempt": attempt,
            "lines": [
                {"seq": first_seq + i, "stream": "stdout", "line": line, "at": 1_700_000_000.0 + i}
                for i, line in enumerate(lines)
            ],
        }
        return await self.post(f"/api/workers/job/{job_id}/logs", body)

    async def queue_check(self) -> ClientResponse:
        return await self.client.get(
            "/api/workers/queue", params={"worker_id": self.worker_id or ""}, headers=self.headers
        )

    async def disconnect(self) -> ClientResponse:
        return await self.post("/api/workers/disconnect", {"worker_id": self.worker_id})

    async def take_job(self) -> dict[str, Any]:
        """Wait for the next job_submit on the open stream and acknowledge it."""
        if self.stream is None:
            raise AssertionError("open the stream first")
        event = (await self.stream.expect("job_submit")).data
        resp = await self.report(event["job_id"], "starting")
        if resp.status != 200:
            raise AssertionError(f"ack failed: {resp.status} {await resp.text()}")
        return event

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None


async def eventually(
    check: Callable[[], Awaitable[T | None]], what: str, timeout_s: float = STREAM_TIMEOUT_S
) -> T:
    """Poll ``check`` (small real sleeps) until it returns something truthy; bounded."""
    deadline = time.monotonic() + timeout_s
    last = await check()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}: {last!r}")
        await asyncio.sleep(0.01)
        last = await check()
    return last
