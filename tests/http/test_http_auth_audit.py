"""A closed window's summary: written to the audit log, logged when there is none, and a
failing write never escapes into the server."""

from __future__ import annotations

from typing import Any

import structlog
from aiohttp import web

from tunefleet.http import keys
from tunefleet.http.auth_audit import FailureWindowAudit, window_detail
from tunefleet.http.auth_throttle import FailureWindow


def window() -> FailureWindow:
    closed = FailureWindow("203.0.113.7", 1060.0, 1_700_000_000.0, 1_700_000_042.5, 60.0)
    closed.failures, closed.throttled, closed.recorded = 20, 80, 1
    closed.credentials, closed.reasons = ["api"], ["unknown or revoked API token"]
    closed.targets = ["GET /api/queue"]
    return closed


class Audit:
    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.recorded: list[tuple[str, dict[str, Any]]] = []

    async def record(self, kind: str, **fields: Any) -> None:
        if self.fail:
            raise RuntimeError("the audit log is closed")
        self.recorded.append((kind, fields))


def test_the_detail_sums_the_window_up() -> None:
    assert window_detail(window()) == {
        "attempts": 100,
        "refused": 20,
        "throttled": 80,
        "recorded_individually": 1,
        "first_at": "2023-11-14T22:13:20Z",
        "last_at": "2023-11-14T22:14:02.500000Z",
        "window_s": 60.0,
        "credentials": ["api"],
        "reasons": ["unknown or revoked API token"],
        "targets": ["GET /api/queue"],
    }


async def test_a_summary_is_recorded_as_auth_failed_window() -> None:
    app = web.Application()
    audit = Audit()
    app[keys.AUDIT] = audit  # type: ignore[assignment]
    summaries = FailureWindowAudit(app)
    summaries(window())
    await summaries.drain()
    ((kind, fields),) = audit.recorded
    assert kind == "auth.failed_window"
    assert (fields["client_address"], fields["outcome"], fields["actor"]) == (
        "203.0.113.7",
        "denied",
        None,
    )
    assert fields["attempts"] == 100


async def test_without_an_audit_log_the_summary_is_a_log_line() -> None:
    summaries = FailureWindowAudit(web.Application())  # a standby: no fleet, no audit log
    with structlog.testing.capture_logs() as logs:
        summaries(window())
        await summaries.drain()
    (line,) = [entry for entry in logs if entry["event"] == "auth_failed_window"]
    assert (line["client"], line["attempts"]) == ("203.0.113.7", 100)


async def test_a_failing_audit_write_is_logged_not_raised() -> None:
    app = web.Application()
    app[keys.AUDIT] = Audit(fail=True)  # type: ignore[assignment]
    summaries = FailureWindowAudit(app)
    with structlog.testing.capture_logs() as logs:
        summaries(window())
        await summaries.drain()
    assert any(entry["event"] == "auth_failed_window_not_recorded" for entry in logs)
