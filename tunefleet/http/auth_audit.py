"""The audit event that sums up one address's failed sign-ins over one window.

The window's first failure was recorded on its own when it happened (``auth.failed`` or
``worker.register_failed``); this is the rest, written once when the window closes
(tunefleet/http/auth_throttle.py says when), so a guesser costs the disk one row and one
line a window, not one per guess.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import structlog
from aiohttp import web

from tunefleet.audit import AuditKind
from tunefleet.http import keys
from tunefleet.http.auth_throttle import FailureWindow

log = structlog.get_logger(__name__)


def _iso(at: float) -> str:
    text = datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat()
    return text.replace("+00:00", "Z")


def window_detail(window: FailureWindow) -> dict[str, Any]:
    """The summary's detail: what an operator needs to tell a typo from a scan."""
    return {
        "attempts": window.attempts,
        "refused": window.failures,
        "throttled": window.throttled,
        "recorded_individually": window.recorded,
        "first_at": _iso(window.first_at),
        "last_at": _iso(window.last_at),
        "window_s": window.window_s,
        "credentials": list(window.credentials),
        "reasons": list(window.reasons),
        "targets": list(window.targets),
    }


class FailureWindowAudit:
    """Writes each closed window's summary; ``drain`` waits for those still being written
    (at shutdown, before the audit log closes)."""

    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._writes: set[asyncio.Task[None]] = set()

    def __call__(self, window: FailureWindow) -> None:
        detail = window_detail(window)
        log.info("auth_failed_window", client=window.address, **detail)
        audit = self._app.get(keys.AUDIT)
        if audit is None:  # a standby, or the fleet not started: the log line is the record
            return
        task = asyncio.get_running_loop().create_task(self._write(window, detail))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, window: FailureWindow, detail: dict[str, Any]) -> None:
        audit = self._app[keys.AUDIT]
        try:
            await audit.record(
                AuditKind.AUTH_FAILED_WINDOW,
                actor=None,
                outcome="denied",
                client_address=window.address,
                **detail,
            )
        except Exception:
            log.exception("auth_failed_window_not_recorded", client=window.address)

    async def drain(self) -> None:
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)
