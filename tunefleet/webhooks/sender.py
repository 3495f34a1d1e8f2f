"""The sender: the active orchestrator's one task that delivers the outbox.

It reads due deliveries a page at a time (never the whole outbox into memory), sends at
most MAX_IN_FLIGHT at once, each with a REQUEST_TIMEOUT_S limit and without following
redirects, and records every attempt. It runs beside the actors and never inside them:
a slow or dead receiver holds one of its slots, never a dispatch. It starts when this
process becomes the active orchestrator (at start, or on taking over from another) and
so sends whatever the previous one left undelivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Final

import aiohttp
import structlog
from aiohttp.abc import AbstractResolver, ResolveResult

from tunefleet.storage.store import Store
from tunefleet.storage.store_webhooks import AttemptResult, DueDelivery
from tunefleet.webhooks.addresses import address_refusal, url_refusal
from tunefleet.webhooks.chat import slack_body
from tunefleet.webhooks.outbox import WebhookOutbox
from tunefleet.webhooks.policy import (
    KEEP_LOG_S,
    MAX_IN_FLIGHT,
    PAGE,
    PRUNE_EVERY_S,
    PRUNE_PAGE,
    REQUEST_TIMEOUT_S,
    judge,
)
from tunefleet.webhooks.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    signature,
)

log = structlog.get_logger(__name__)

# With nothing due, the outbox is looked at again this often (retries come due by time).
IDLE_POLL_S: Final = 1.0
USER_AGENT: Final = "tunefleet-webhooks/1"
GONE_REASON: Final = "the receiver answered 410 Gone: disabled; enable it again once fixed"
MAX_ERROR_CHARS: Final = 300


class RefusedAddress(OSError):
    """A name resolved to an address webhooks may not reach (SSRF, DNS rebinding)."""


class GuardedResolver(AbstractResolver):
    """Resolves a name, then refuses the connection if any address is forbidden, so a
    public name that re-resolves to 127.0.0.1 or the metadata address is never reached.

    Each lookup runs on a daemon thread of its own, not the loop's default executor: a
    lookup the DNS never answers (a sandbox, an outage) then holds up neither the
    orchestrator's shutdown nor anything else using that executor."""

    def __init__(self, *, allow_private: bool) -> None:
        self._allow_private = allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[Any]] = loop.create_future()

        def look_up() -> None:
            try:
                found: Any = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
                ok = True
            except OSError as error:
                found, ok = error, False
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(_settle_lookup, answer, ok, found)

        threading.Thread(target=look_up, name="webhook-dns", daemon=True).start()
        results: list[ResolveResult] = []
        for fam, _type, proto, _name, address in await answer:
            why = address_refusal(str(address[0]), allow_private=self._allow_private)
            if why is not None:
                raise RefusedAddress(f"{host} resolves to {why}")
            results.append(
                ResolveResult(
                    hostname=host,
                    host=str(address[0]),
                    port=int(address[1]),
                    family=fam,
                    proto=proto,
                    flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
                )
            )
        if not results:
            raise OSError(f"no address for {host}")
        return results

    async def close(self) -> None:
        return None


def _settle_lookup(answer: asyncio.Future[list[Any]], ok: bool, found: Any) -> None:
    if answer.done():  # the attempt was abandoned (stopped, timed out)
        return
    if ok:
        answer.set_result(found)
    else:
        answer.set_exception(found)


def request_body(due: DueDelivery) -> bytes:
    """The bytes sent (and signed): the event itself, or the chat message for it."""
    event = due.event.body
    if due.subscription.format == "slack":
        payload: Any = slack_body(due.event.kind, event.get("data") or {})
    else:
        payload = event
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


class WebhookSender:
    def __init__(
        self,
        store: Store,
        outbox: WebhookOutbox,
        *,
        allow_private: bool = False,
        now: Callable[[], float] = time.time,
        max_in_flight: int = MAX_IN_FLIGHT,
        timeout_s: float = REQUEST_TIMEOUT_S,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.outbox = outbox
        self.allow_private = allow_private
        self._now = now
        self._max_in_flight = max_in_flight
        self._timeout_s = timeout_s
        self._rng = rng or random.Random()
        # Deliveries being sent: their subscription and task.
        self._in_flight: dict[int, tuple[int, asyncio.Task[None]]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()

        def wake_from_thread() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                loop.call_soon_threadsafe(self._wake.set)

        self.outbox.on_staged(wake_from_thread)
        # After each commit, on the DB thread: wake up if it stored events.
        self.store.db.on_commit(self.outbox.committed)
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(allow_private=self.allow_private),
            limit=self._max_in_flight,
        )
        self._session = aiohttp.ClientSession(
            connector=connector, headers={"User-Agent": USER_AGENT}
        )
        self._task = asyncio.create_task(self._run(), name="webhook-sender")

    async def stop(self) -> None:
        """Stop sending; what is in flight is abandoned and sent again by whoever runs
        next (the receiver tells the repeat by its X-Tunefleet-Delivery)."""
        sending = [task for _, task in self._in_flight.values()]
        tasks = [t for t in (self._task, *sending) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._session is not None:
            await self._session.close()

    def kick(self) -> None:
        """Look at the outbox now (a redelivery by hand, a test event)."""
        self._wake.set()

    async def _run(self) -> None:
        pruned_at = -PRUNE_EVERY_S
        while True:
            self._wake.clear()
            if time.monotonic() - pruned_at >= PRUNE_EVERY_S:
                pruned_at = time.monotonic()
                await self._prune()
            if await self._start_due():
                continue  # more may be due: fill the free slots first
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), IDLE_POLL_S)

    async def _start_due(self) -> bool:
        """Start the oldest due delivery of each subscription with none in flight, up to
        the free slots: one at a time per subscription, so a healthy receiver gets its
        events in the order they happened, and one slow receiver holds one slot.
        Whether any was started."""
        free = self._max_in_flight - len(self._in_flight)
        busy = {sub for sub, _ in self._in_flight.values()}
        if free <= 0 or (busy and len(busy) >= self.outbox.count):
            # Nothing could start: no database read (a slow receiver's backlog would be
            # scanned on every commit that adds to it).
            return False
        try:
            due = await self.store.webhooks.due(
                self._now(), PAGE, tuple(self._in_flight), tuple(busy)
            )
        except Exception as error:  # the database is away: try again later
            log.warning("webhooks.read_failed", error=str(error))
            return False
        started = False
        for item in due:
            sub_id = item.subscription.id
            if free <= 0 or sub_id in busy:
                continue
            busy.add(sub_id)
            free -= 1
            task = asyncio.create_task(self._attempt(item))
            self._in_flight[item.delivery.id] = (sub_id, task)
            task.add_done_callback(partial(self._done, item.delivery.id))
            started = True
        return started

    async def _prune(self) -> None:
        """Forget the delivery log older than KEEP_LOG_S, PRUNE_PAGE rows a write, so the
        outbox's tables stay bounded and no one write is long."""
        before = self._now() - KEEP_LOG_S
        try:
            for _ in range(100):  # at most 100 pages an hour; the rest the hour after
                if await self.store.webhooks.prune(before, PRUNE_PAGE) < PRUNE_PAGE:
                    break
        except Exception as error:  # tried again at the next hour
            log.warning("webhooks.prune_failed", error=str(error))

    def _done(self, delivery_pk: int, _task: object = None) -> None:
        self._in_flight.pop(delivery_pk, None)
        self._wake.set()

    async def _attempt(self, due: DueDelivery) -> None:
        status, error, started = None, None, time.monotonic()
        refusal = url_refusal(due.subscription.url, allow_private=self.allow_private)
        if refusal is not None:
            error = f"refused: {refusal}"
        else:
            status, error = await self._post(due)
        latency_ms = round((time.monotonic() - started) * 1000, 3)
        now = self._now()
        verdict = judge(status, due.delivery.attempts + 1, due.delivery.created_at, now, self._rng)
        result = AttemptResult(now, status, latency_ms, error, verdict.state, verdict.next_at)
        try:
            await self.store.webhooks.record_attempt(due.delivery.id, result)
            if verdict.disable:
                await self.store.webhooks.set_disabled(due.subscription.id, GONE_REASON)
                self.outbox.reload(await self.store.webhooks.subscriptions())
                log.warning("webhooks.disabled", subscription=due.subscription.id, reason="410")
        except Exception as failure:  # not recorded: it stays pending and is sent again
            log.warning("webhooks.record_failed", error=str(failure))

    async def _post(self, due: DueDelivery) -> tuple[int | None, str | None]:
        assert self._session is not None
        body = request_body(due)
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(due.subscription.secret, int(time.time()), body),
            EVENT_HEADER: due.event.kind,
            DELIVERY_HEADER: due.delivery.delivery_id,
        }
        timeout = aiohttp.ClientTimeout(total=self._timeout_s)
        try:
            async with self._session.post(
                due.subscription.url,
                data=body,
                headers=headers,
                allow_redirects=False,
                timeout=timeout,
            ) as response:
                await response.content.read(4096)  # a little of the answer, never all
                status = response.status
        except TimeoutError:
            return None, f"no answer within {self._timeout_s:g} s"
        except (aiohttp.ClientError, OSError) as failure:
            return None, f"{type(failure).__name__}: {failure}"[:MAX_ERROR_CHARS]
        if 300 <= status < 400:
            return status, "redirects are not followed: give the final URL"
        return status, None if 200 <= status < 300 else f"HTTP {status}"
