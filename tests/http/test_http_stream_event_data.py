"""A worker stream event's data line: compact JSON, anything JSON lacks as its str()."""

from __future__ import annotations

import datetime
import json
from pathlib import PurePosixPath
from typing import Any

from tunefleet.actors.stream import StreamEvent
from tunefleet.http.routes_workers import _send


class Sent:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, str | None]] = []

    async def send(self, data: str, id: str | None = None, event: str | None = None) -> None:
        self.calls.append((data, id, event))


async def test_event_data_is_what_json_dumps_writes_compactly() -> None:
    data: dict[str, Any] = {
        "job_id": "j_1",
        "config": {"lr": 0.0001, "name": "zoë", "steps": [1, 2]},
        "when": datetime.datetime(2026, 11, 26, 19, 40, tzinfo=datetime.UTC),
        "path": PurePosixPath("/data/set"),
        "env": {},
    }
    sse = Sent()
    await _send(sse, StreamEvent(7, "job_submit", data))  # type: ignore[arg-type]
    (call,) = sse.calls
    assert call == (json.dumps(data, separators=(",", ":"), default=str), "7", "job_submit")
    assert '"when":"2026-11-26 19:40:00+00:00","path":"/data/set"' in call[0]
