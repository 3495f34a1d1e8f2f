"""Typed application keys: what the orchestrator keeps on its aiohttp app."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from tunefleet.actors.clock import Clock
    from tunefleet.actors.events import EventHub
    from tunefleet.actors.fleet import Fleet
    from tunefleet.artifacts.service import Artifacts
    from tunefleet.audit import AuditLog
    from tunefleet.disk_guard import DiskGuard
    from tunefleet.http.app import ServerOptions
    from tunefleet.http.leadership import Leadership
    from tunefleet.http.stream_watch import StreamWatch
    from tunefleet.jobconfigs import ConfigCatalog
    from tunefleet.metrics import Metrics
    from tunefleet.storage.database import Database
    from tunefleet.storage.store import Store
    from tunefleet.webhooks.outbox import WebhookOutbox
    from tunefleet.webhooks.sender import WebhookSender

OPTIONS: web.AppKey[ServerOptions] = web.AppKey("options")
CLOCK: web.AppKey[Clock] = web.AppKey("clock")
DATABASE: web.AppKey[Database] = web.AppKey("database")
STORE: web.AppKey[Store] = web.AppKey("store")
FLEET: web.AppKey[Fleet] = web.AppKey("fleet")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
HUB: web.AppKey[EventHub] = web.AppKey("hub")
AUDIT: web.AppKey[AuditLog] = web.AppKey("audit")
CATALOG: web.AppKey[ConfigCatalog] = web.AppKey("catalog")
BANNER: web.AppKey[str] = web.AppKey("banner")
ARTIFACTS: web.AppKey[Artifacts] = web.AppKey("artifacts")
OPEN_STREAMS: web.AppKey[StreamWatch] = web.AppKey("open_streams")
LEADERSHIP: web.AppKey[Leadership] = web.AppKey("leadership")
# What the process does when it loses leadership (the real server exits with code 3).
STEP_DOWN: web.AppKey[Callable[[str], None]] = web.AppKey("step_down")
BACKGROUND: web.AppKey[set[asyncio.Task[None]]] = web.AppKey("background")
# The free-disk floor (--min-free-disk) that bulk writes are checked against.
DISK_GUARD: web.AppKey[DiskGuard] = web.AppKey("disk_guard")
# The webhook outbox's writer (its subscriptions kept) and the active one's sender.
WEBHOOKS: web.AppKey[WebhookOutbox] = web.AppKey("webhooks")
WEBHOOK_SENDER: web.AppKey[WebhookSender] = web.AppKey("webhook_sender")
