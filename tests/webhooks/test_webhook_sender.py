"""The sender over the in-memory store (issue 27): a name that resolves to a forbidden
address is refused at connect time (DNS rebinding); a receiver slower than the request
timeout costs one attempt and a retry, never a hang; the outbox is read in pages."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tunefleet.storage.memory import memory_store
from tunefleet.storage.store import Store
from tunefleet.webhooks.outbox import WebhookOutbox
from tunefleet.webhooks.sender import GuardedResolver, RefusedAddress, WebhookSender


async def test_a_name_resolving_to_loopback_is_refused_when_connecting() -> None:
    with pytest.raises(RefusedAddress, match="loopback"):
        await GuardedResolver(allow_private=False).resolve("localhost", 80)
    found = await GuardedResolver(allow_private=True).resolve("localhost", 80)
    assert found and all(entry["host"] in ("127.0.0.1", "::1") for entry in found)


@pytest.fixture
async def slow_url() -> AsyncIterator[str]:
    async def hook(request: web.Request) -> web.Response:
        await asyncio.sleep(30)  # far past the sender's timeout
        return web.Response(text="late")

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/hook"))
    await server.close()


async def _subscribe(store: Store, outbox: WebhookOutbox, url: str) -> int:
    row = await store.webhooks.add_subscription(
        {"url": url, "secret": "whsec_" + "s" * 20, "events": ["job.submitted"], "created_by": "t"}
    )
    outbox.reload(await store.webhooks.subscriptions())
    return row.id


async def test_a_receiver_slower_than_the_timeout_is_retried_later(slow_url: str) -> None:
    store, outbox = memory_store(), WebhookOutbox("http://orch")
    sub_id = await _subscribe(store, outbox, slow_url)
    await store.atomically(lambda repos: outbox.stage_test(repos, sub_id, {"message": "hi"}))
    sender = WebhookSender(store, outbox, allow_private=True, timeout_s=0.2)
    sender.start()
    try:
        for _ in range(200):
            (found, _kind, _id), *_ = await store.webhooks.deliveries(sub_id)
            if found.attempts:
                break
            await asyncio.sleep(0.02)
    finally:
        await sender.stop()
    assert found.state == "pending" and found.attempts == 1
    assert found.last_error == "no answer within 0.2 s"
    assert found.next_at > found.created_at  # a retry, later


async def test_the_outbox_is_read_a_page_at_a_time() -> None:
    store, outbox = memory_store(), WebhookOutbox("http://orch")
    sub_ids = [await _subscribe(store, outbox, f"https://h{i}.example.com/x") for i in range(3)]
    for sub_id in sub_ids:
        for _ in range(100):
            await store.atomically(lambda repos, s=sub_id: outbox.stage_test(repos, s, {}))
    page = await store.webhooks.due(10**12, 64, busy=[sub_ids[0]])
    assert len(page) == 64 and sub_ids[0] not in {d.subscription.id for d in page}


@pytest.fixture
async def redirecting_url() -> AsyncIterator[tuple[str, list[str]]]:
    hits: list[str] = []

    async def hook(request: web.Request) -> web.Response:
        hits.append(request.path)
        if request.path == "/hook":
            raise web.HTTPFound("/elsewhere")
        return web.Response(text="followed")

    app = web.Application()
    app.router.add_post("/{tail:.*}", hook)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("/hook")), hits
    await server.close()


async def test_a_redirect_is_not_followed(redirecting_url: tuple[str, list[str]]) -> None:
    url, hits = redirecting_url
    store, outbox = memory_store(), WebhookOutbox("http://orch")
    sub_id = await _subscribe(store, outbox, url)
    await store.atomically(lambda repos: outbox.stage_test(repos, sub_id, {}))
    sender = WebhookSender(store, outbox, allow_private=True)
    sender.start()
    try:
        for _ in range(200):
            (found, _kind, _id), *_ = await store.webhooks.deliveries(sub_id)
            if found.attempts:
                break
            await asyncio.sleep(0.02)
    finally:
        await sender.stop()
    assert hits == ["/hook"]  # never /elsewhere
    assert (found.state, found.last_status) == ("pending", 302)
    assert found.last_error is not None and "redirects are not followed" in found.last_error
