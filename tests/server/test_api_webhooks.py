"""Webhooks over HTTP (issue 27): subscriptions made, listed and removed with the secret
shown once; SSRF refusals; a user's own subscription hears only of their own jobs; the
outbox is written with the change; deliveries are signed, logged, redelivered by hand;
a 410 disables the subscription. The receiver is an aiohttp server on 127.0.0.1."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.server.conftest import Server, ServerMaker
from tests.server.protocol import eventually
from tests.server.usage_testkit import T, record_attempt
from tests.server.users_testkit import submit_as, three_people
from tunefleet.http.routes_webhooks import MAX_OWN_SUBSCRIPTIONS, MAX_SUBSCRIPTIONS
from tunefleet.storage.models import WebhookDelivery, WebhookEvent
from tunefleet.webhooks.events import WORKER_EVENTS
from tunefleet.webhooks.signing import verify

HOOKS = "/api/admin/webhooks"


@dataclass
class Receiver:
    """Records every delivery; answers ``status`` (200 unless a test changes it)."""

    url: str = ""
    status: int = 200
    got: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        found.got.append({"headers": dict(request.headers), "raw": body, "json": json.loads(body)})
        return web.Response(status=found.status)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    found.url = str(server.make_url("/hook"))
    yield found
    await server.close()


@pytest.fixture
async def private_server(make_server: ServerMaker) -> Server:
    return await make_server(webhooks_allow_private=True)


async def _rows(server: Server) -> tuple[int, int]:
    def count() -> tuple[int, int]:
        return WebhookEvent.select().count(), WebhookDelivery.select().count()

    return await server.store.db.read(count)


async def test_no_subscription_writes_nothing_to_the_outbox(server: Server) -> None:
    await server.submit()
    assert await _rows(server) == (0, 0)


async def test_a_subscription_is_made_listed_and_removed_with_its_secret_shown_once(
    private_server: Server, receiver: Receiver
) -> None:
    server = private_server
    created = await server.ok("POST", HOOKS, {"url": receiver.url, "events": ["job.submitted"]})
    secret = created["secret"]
    assert secret.startswith("whsec_") and secret not in created["secret_hint"]
    listed = await server.ok("GET", HOOKS)
    assert [w["id"] for w in listed["webhooks"]] == [created["id"]]
    assert secret not in json.dumps(listed)
    assert "orchestrator.takeover" in listed["events"]
    audit = await server.audit(kind="webhook.created")
    assert audit and secret not in json.dumps(audit)
    resp = await server.delete(f"{HOOKS}/{created['id']}")
    assert resp.status == 200
    assert (await server.ok("GET", HOOKS))["webhooks"] == []
    resp = await server.delete(f"{HOOKS}/{created['id']}")
    assert resp.status == 404 and "tunefleet webhooks list" in (await resp.json())["detail"]


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:9/hook", "--webhooks-allow-private"),
        ("http://169.254.169.254/latest", "metadata"),
        ("http://10.0.0.1/hook", "private"),
        ("file:///etc/passwd", "http:// or https://"),
        ("https://u:p@example.com/hook", "credentials"),
    ],
)
async def test_ssrf_targets_are_refused(server: Server, url: str, words: str) -> None:
    resp = await server.post(HOOKS, {"url": url})
    data = await resp.json()
    assert resp.status == 400 and words in data["detail"] and "\n" not in data["detail"]
    assert (await server.ok("GET", HOOKS))["webhooks"] == []


async def test_bad_events_are_refused(server: Server) -> None:
    resp = await server.post(HOOKS, {"url": "https://hooks.example.com/x", "events": ["job.done"]})
    data = await resp.json()
    assert resp.status == 400 and "job.done" in data["detail"] and "job.completed" in data["detail"]
    resp = await server.post(HOOKS, {"url": "https://hooks.example.com/x", "format": "teams"})
    assert resp.status == 400


async def test_a_user_subscribes_to_their_own_jobs_only(server: Server) -> None:
    people = await three_people(server)
    url = "https://hooks.example.com/alice"
    refused = await server.post(HOOKS, {"url": url, "events": ["worker.offline"]}, people.alice)
    assert refused.status == 403 and "admin.webhooks" in (await refused.json())["detail"]
    resp = await server.post(HOOKS, {"url": url, "events": ["job.submitted"]}, people.alice)
    assert resp.status == 200
    mine = await resp.json()
    assert mine["owner"] == "alice"
    await submit_as(server, people.bob)  # bob's job, in alice's team: not hers to hear of
    assert await _rows(server) == (0, 0)
    await submit_as(server, people.alice)
    assert await _rows(server) == (1, 1)
    # Others do not see it; its owner and admins do.
    carol = await server.get(HOOKS, people.carol)
    assert (await carol.json())["webhooks"] == []
    gone = await server.delete(f"{HOOKS}/{mine['id']}", people.carol)
    assert gone.status == 404
    for path in (f"{HOOKS}/{mine['id']}/test", f"{HOOKS}/{mine['id']}/enable"):
        assert (await server.post(path, {}, people.carol)).status == 404
    assert (await server.get(f"{HOOKS}/{mine['id']}/deliveries", people.carol)).status == 404
    assert (await server.get(f"{HOOKS}/abc/deliveries")).status == 404
    assert len((await server.ok("GET", HOOKS))["webhooks"]) == 1


async def test_deliveries_are_signed_logged_and_redelivered_by_hand(
    private_server: Server, receiver: Receiver
) -> None:
    server = private_server
    hook = await server.ok("POST", HOOKS, {"url": receiver.url, "events": ["job.submitted"]})
    job_id = (await server.submit())["job_id"]
    await eventually(lambda: _got(receiver, 1), "the delivery")
    first = receiver.got[0]
    headers = first["headers"]
    assert headers["X-Tunefleet-Event"] == "job.submitted"
    assert verify(hook["secret"], headers["X-Tunefleet-Signature"], first["raw"], time.time())
    assert not verify("whsec_wrong", headers["X-Tunefleet-Signature"], first["raw"], time.time())
    event = first["json"]
    assert (event["type"], event["data"]["job_id"]) == ("job.submitted", job_id)
    assert event["data"]["links"]["job"].endswith(f"/#/jobs/{job_id}")

    async def logged() -> dict[str, Any] | None:
        found = await server.ok("GET", f"{HOOKS}/{hook['id']}/deliveries")
        done = [d for d in found["deliveries"] if d["state"] == "delivered"]
        return done[0] if done else None

    delivery = await eventually(logged, "the delivery log")
    assert delivery["delivery_id"] == headers["X-Tunefleet-Delivery"]
    assert [a["status_code"] for a in delivery["log"]] == [200]
    assert delivery["log"][0]["latency_ms"] >= 0
    again = f"{HOOKS}/{hook['id']}/deliveries/{delivery['delivery_id']}/redeliver"
    assert (await server.ok("POST", again))["success"] is True
    await eventually(lambda: _got(receiver, 2), "the redelivery")
    assert receiver.got[1]["headers"]["X-Tunefleet-Delivery"] == delivery["delivery_id"]
    missing = await server.post(f"{HOOKS}/{hook['id']}/deliveries/d_nope/redeliver", {})
    assert missing.status == 404


async def test_a_rotated_secret_signs_what_is_sent_from_then_on(
    private_server: Server, receiver: Receiver
) -> None:
    """The new secret is shown once (made, or the one given), audited masked; the next
    delivery verifies under it and not under the old one; a short secret, or a webhook
    that is not there, is refused."""
    server = private_server
    hook = await server.ok("POST", HOOKS, {"url": receiver.url, "events": ["job.submitted"]})
    rotated = await server.ok("POST", f"{HOOKS}/{hook['id']}/rotate-secret", {})
    new = rotated["secret"]
    assert new.startswith("whsec_") and new != hook["secret"]
    assert rotated["secret_hint"] != hook["secret_hint"] and new not in rotated["secret_hint"]
    assert new not in json.dumps(await server.ok("GET", HOOKS))
    [audit] = await server.audit(kind="webhook.secret_rotated")
    assert audit["target"] == f"webhook:{hook['id']}" and new not in json.dumps(audit)
    await server.submit()
    await eventually(lambda: _got(receiver, 1), "the delivery")
    sent = receiver.got[0]
    signed = sent["headers"]["X-Tunefleet-Signature"]
    assert verify(new, signed, sent["raw"], time.time())
    assert not verify(hook["secret"], signed, sent["raw"], time.time())
    given = await server.ok("POST", f"{HOOKS}/{hook['id']}/rotate-secret", {"secret": "g" * 24})
    assert given["secret"] == "g" * 24
    short = await server.post(f"{HOOKS}/{hook['id']}/rotate-secret", {"secret": "short"})
    assert short.status == 400 and "secret" in (await short.json())["detail"]
    missing = await server.post(f"{HOOKS}/999/rotate-secret", {})
    assert missing.status == 404 and "tunefleet webhooks list" in (await missing.json())["detail"]


async def test_a_slack_subscription_gets_a_chat_message(
    private_server: Server, receiver: Receiver
) -> None:
    server = private_server
    body = {"url": receiver.url, "events": ["job.submitted"], "format": "slack"}
    await server.ok("POST", HOOKS, body)
    job_id = (await server.submit(name="tiny-example"))["job_id"]
    await eventually(lambda: _got(receiver, 1), "the chat message")
    message = receiver.got[0]["json"]
    assert message["text"] == f"{job_id} tiny-example was submitted"
    assert message["blocks"][0]["text"]["text"] == message["text"]


async def test_a_410_disables_the_subscription_and_says_so(
    private_server: Server, receiver: Receiver
) -> None:
    server = private_server
    receiver.status = 410
    hook = await server.ok("POST", HOOKS, {"url": receiver.url})
    test = await server.ok("POST", f"{HOOKS}/{hook['id']}/test")
    assert test["event_id"].startswith("ev_")

    async def disabled() -> dict[str, Any] | None:
        found = (await server.ok("GET", HOOKS))["webhooks"][0]
        return found if not found["enabled"] else None

    found = await disabled_view(server, disabled)
    assert "410" in found["disabled_reason"]
    await server.submit()  # a disabled subscription hears nothing more
    assert len(receiver.got) == 1
    log = await server.ok("GET", f"{HOOKS}/{hook['id']}/deliveries")
    delivery = log["deliveries"][0]
    assert (delivery["state"], delivery["last_status"]) == ("failed", 410)
    again = f"{HOOKS}/{hook['id']}/deliveries/{delivery['delivery_id']}/redeliver"
    refused = await server.post(again, {})
    assert refused.status == 409
    assert f"tunefleet webhooks enable {hook['id']}" in (await refused.json())["detail"]
    assert (await server.ok("POST", f"{HOOKS}/{hook['id']}/enable"))["success"] is True
    assert (await server.ok("GET", HOOKS))["webhooks"][0]["enabled"] is True


async def disabled_view(server: Server, check: Any) -> dict[str, Any]:
    return await eventually(check, "the subscription to be disabled")


async def _got(receiver: Receiver, count: int) -> bool:
    return len(receiver.got) >= count


async def _events(server: Server) -> list[tuple[str, dict[str, Any]]]:
    def read() -> list[tuple[str, dict[str, Any]]]:
        return [(e.kind, e.body) for e in WebhookEvent.select().order_by(WebhookEvent.id)]

    return await server.store.db.read(read)


async def test_budget_warnings_and_refusals_are_events(server: Server) -> None:
    people = await three_people(server)
    url = "https://hooks.example.com/budget"
    await server.ok("POST", HOOKS, {"url": url, "events": ["budget.warning", "budget.exceeded"]})
    budget = "/api/admin/teams/ml/budget"
    await server.ok("POST", budget, {"gpu_hours": 0.5, "period": "month", "action": "warn"})
    await record_attempt(server, "j_a", "bob", "ml", 1, T - 3600, None)
    job_id = await submit_as(server, people.alice)
    await server.ok("POST", budget, {"gpu_hours": 0.5, "period": "month", "action": "block"})
    refused = await server.client.post(
        "/api/queue/submit", json={"config": {"model_type": "lora"}}, headers=people.alice
    )
    assert refused.status == 403
    (warn_kind, warning), (block_kind, exceeded) = await _events(server)
    assert (warn_kind, warning["data"]["job_id"]) == ("budget.warning", job_id)
    assert "0.5 GPU-hour budget" in warning["data"]["detail"]["message"]
    assert (block_kind, exceeded["data"]["team"], exceeded["data"]["user"]) == (
        "budget.exceeded",
        "ml",
        "alice",
    )


async def test_workers_coming_and_going_and_quarantined_are_events(server: Server) -> None:
    url = "https://hooks.example.com/workers"
    await server.ok("POST", HOOKS, {"url": url, "events": list(WORKER_EVENTS)})
    worker = await server.connected_worker("gpu-1")
    worker.close()
    await server.clock.advance(200)  # past the reconnect grace and the heartbeat timeout
    await server.wait_worker(worker.worker_id, "offline")
    # The quarantine (issue 25's) calls this once it has stored its change.
    await server.fleet.ctx.persistence.note_worker_quarantined(worker.worker_id, "ECC errors")
    kinds = [(kind, body["data"]["worker_id"]) for kind, body in await _events(server)]
    assert kinds == [
        ("worker.online", worker.worker_id),
        ("worker.offline", worker.worker_id),
        ("worker.quarantined", worker.worker_id),
    ]
    quarantined = (await _events(server))[-1][1]["data"]
    assert (quarantined["name"], quarantined["reason"]) == ("gpu-1", "ECC errors")


async def test_subscriptions_are_bounded(server: Server) -> None:
    people = await three_people(server)
    body = {"url": "https://hooks.example.com/x", "events": ["job.completed"]}
    for _ in range(MAX_OWN_SUBSCRIPTIONS):
        assert (await server.post(HOOKS, body, people.alice)).status == 200
    refused = await server.post(HOOKS, body, people.alice)
    assert refused.status == 409
    assert "remove one first" in (await refused.json())["detail"]
    for _ in range(MAX_SUBSCRIPTIONS - MAX_OWN_SUBSCRIPTIONS):
        await server.ok("POST", HOOKS, body)
    full = await server.post(HOOKS, body)
    assert (
        full.status == 409 and "the most this orchestrator keeps" in (await full.json())["detail"]
    )
