"""Webhook subscriptions (issue 27): `POST/GET/DELETE /api/admin/webhooks`, a test event,
re-enabling, and each subscription's delivery log with redelivery by hand.

`admin.webhooks` manages every subscription and every event. Without it a user manages
only their own subscriptions, which hear only of their own jobs (the job and approval
and budget events; the outbox filters by the job's user, a narrowing of what
http/job_access lets them see); someone else's subscription is a 404, as a job is.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tunefleet.actors.records import iso
from tunefleet.audit import AuditKind
from tunefleet.http import keys
from tunefleet.http.auth import ADMIN_WEBHOOKS, ApiPrincipal
from tunefleet.http.body import parse_body, parse_query
from tunefleet.http.errors import ApiError
from tunefleet.http.route_table import actor_name, principal_of, routes
from tunefleet.http.schemas_webhooks import (
    CreateWebhookRequest,
    DeliveryListQuery,
    DeliveryListResponse,
    RotateSecretRequest,
    WebhookActionResponse,
    WebhookCreated,
    WebhookListResponse,
)
from tunefleet.storage.store_webhooks import (
    WebhookAttemptRow,
    WebhookDeliveryRow,
    WebhookSubscriptionRow,
)
from tunefleet.webhooks.addresses import url_refusal
from tunefleet.webhooks.events import EVENT_KINDS, USER_EVENT_KINDS
from tunefleet.webhooks.policy import DeliveryState
from tunefleet.webhooks.signing import masked, new_secret

_NOT_FOUND = {404: "No such webhook (or not yours)"}
# Every event is written once per subscription that wants it, in the job step's commit:
# subscriptions are bounded so no one can make every step write thousands of rows.
MAX_OWN_SUBSCRIPTIONS = 10  # a user's own, without admin.webhooks
MAX_SUBSCRIPTIONS = 100


def subscription_view(row: WebhookSubscriptionRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "url": row.url,
        "events": list(row.events),
        "format": row.format,
        "team": row.team_name,
        "user": row.user_name,
        "worker_labels": dict(row.worker_labels),
        "owner": row.owner,
        "secret_hint": masked(row.secret),
        "created_by": row.created_by,
        "created_at": iso(row.created_at),
        "enabled": row.disabled_at is None,
        "disabled_at": iso(row.disabled_at),
        "disabled_reason": row.disabled_reason,
    }


def delivery_view(row: WebhookDeliveryRow, kind: str, event_id: str) -> dict[str, Any]:
    return {
        "delivery_id": row.delivery_id,
        "event_id": event_id,
        "event": kind,
        "state": row.state,
        "attempts": row.attempts,
        "next_attempt_at": iso(row.next_at) if row.state == DeliveryState.PENDING else None,
        "last_status": row.last_status,
        "last_error": row.last_error,
        "last_latency_ms": row.last_latency_ms,
        "created_at": iso(row.created_at),
        "delivered_at": iso(row.delivered_at),
    }


def attempt_view(row: WebhookAttemptRow) -> dict[str, Any]:
    return {
        "at": iso(row.at),
        "status_code": row.status_code,
        "latency_ms": row.latency_ms,
        "error": row.error,
    }


def _manages_all(principal: ApiPrincipal) -> bool:
    return principal.has(ADMIN_WEBHOOKS)


async def _reload(request: web.Request) -> None:
    store = request.app[keys.STORE]
    request.app[keys.WEBHOOKS].reload(await store.webhooks.subscriptions())


def _no_such_webhook(raw: str) -> ApiError:
    return ApiError(404, f"No such webhook: {raw}; `tunefleet webhooks list` shows the ids")


async def _own_subscription(request: web.Request) -> WebhookSubscriptionRow:
    """The subscription named in the path, if the caller may manage it (404 otherwise)."""
    raw = request.match_info["webhook_id"]
    if not raw.isdigit():
        raise _no_such_webhook(raw)
    row = await request.app[keys.STORE].webhooks.subscription(int(raw))
    principal = principal_of(request)
    if row is None or not (_manages_all(principal) or row.owner == principal.user):
        raise _no_such_webhook(raw)
    return row


def _checked_events(wanted: list[str] | None, principal: ApiPrincipal) -> list[str]:
    allowed = EVENT_KINDS if _manages_all(principal) else USER_EVENT_KINDS
    if wanted is None:
        return list(allowed)
    unknown = [e for e in wanted if e not in EVENT_KINDS]
    if unknown:
        raise ApiError(
            400, f"events: unknown {', '.join(unknown)}; the events are {', '.join(EVENT_KINDS)}"
        )
    beyond = [e for e in wanted if e not in allowed]
    if beyond:
        raise ApiError(
            403,
            f"Permission denied: {', '.join(beyond)} need admin.webhooks; without it you may "
            f"subscribe to your own jobs' events ({', '.join(USER_EVENT_KINDS)})",
        )
    if not wanted:
        raise ApiError(400, "events: give at least one event, or leave it out for all")
    return list(dict.fromkeys(wanted))


@routes.route(
    "POST",
    "/api/admin/webhooks",
    summary="Subscribe a URL to events (the signing secret is shown once, in this answer)",
    request=CreateWebhookRequest,
    response=WebhookCreated,
    auth="api",
    errors={
        400: "Bad URL, unknown event",
        403: "Events only admin.webhooks may have",
        409: "Too many webhooks (10 a user, 100 in all)",
    },
)
async def create_webhook(request: web.Request) -> web.StreamResponse:
    body = await parse_body(request, CreateWebhookRequest)
    options = request.app[keys.OPTIONS]
    refusal = url_refusal(body.url, allow_private=options.webhooks_allow_private)
    if refusal is not None:
        raise ApiError(400, f"url: {refusal}")
    principal = principal_of(request)
    events = _checked_events(body.events, principal)
    owner = None if _manages_all(principal) else principal.user
    store = request.app[keys.STORE]
    existing = await store.webhooks.subscriptions()
    if len(existing) >= MAX_SUBSCRIPTIONS:
        raise ApiError(
            409,
            f"there are {len(existing)} webhooks, the most this orchestrator keeps; remove "
            "one first (tunefleet webhooks remove ID)",
        )
    if owner is not None and sum(r.owner == owner for r in existing) >= MAX_OWN_SUBSCRIPTIONS:
        raise ApiError(
            409,
            f"you have {MAX_OWN_SUBSCRIPTIONS} webhooks, the most a user keeps; remove one "
            "first (tunefleet webhooks remove ID)",
        )
    secret = body.secret or new_secret()
    values = {
        "url": body.url,
        "secret": secret,
        "events": events,
        "team_name": body.team,
        "user_name": body.user,
        "worker_labels": body.worker_labels,
        "format": body.format,
        "owner": owner,
        "created_by": principal.user or principal.name,
    }
    row = await store.webhooks.add_subscription(values)
    await _reload(request)
    await request.app[keys.AUDIT].record(
        AuditKind.WEBHOOK_CREATED,
        actor=actor_name(request),
        target=f"webhook:{row.id}",
        url=row.url,
        events=events,
        format=row.format,
    )
    return web.json_response({**subscription_view(row), "secret": secret})


@routes.route(
    "GET",
    "/api/admin/webhooks",
    summary="List webhook subscriptions (yours, or every one with admin.webhooks)",
    response=WebhookListResponse,
    auth="api",
)
async def list_webhooks(request: web.Request) -> web.StreamResponse:
    principal = principal_of(request)
    rows = await request.app[keys.STORE].webhooks.subscriptions()
    mine = [r for r in rows if _manages_all(principal) or r.owner == principal.user]
    allowed = EVENT_KINDS if _manages_all(principal) else USER_EVENT_KINDS
    return web.json_response(
        {"webhooks": [subscription_view(r) for r in mine], "events": list(allowed)}
    )


@routes.route(
    "DELETE",
    "/api/admin/webhooks/{webhook_id}",
    summary="Remove a webhook subscription and its delivery log",
    response=WebhookActionResponse,
    auth="api",
    errors=_NOT_FOUND,
)
async def delete_webhook(request: web.Request) -> web.StreamResponse:
    row = await _own_subscription(request)
    await request.app[keys.STORE].webhooks.delete_subscription(row.id)
    await _reload(request)
    await request.app[keys.AUDIT].record(
        AuditKind.WEBHOOK_DELETED, actor=actor_name(request), target=f"webhook:{row.id}"
    )
    return web.json_response({"success": True, "id": row.id})


@routes.route(
    "POST",
    "/api/admin/webhooks/{webhook_id}/enable",
    summary="Enable a subscription again (after a 410 from its receiver disabled it)",
    response=WebhookActionResponse,
    auth="api",
    errors=_NOT_FOUND,
)
async def enable_webhook(request: web.Request) -> web.StreamResponse:
    row = await _own_subscription(request)
    await request.app[keys.STORE].webhooks.set_disabled(row.id, None)
    await _reload(request)
    await request.app[keys.AUDIT].record(
        AuditKind.WEBHOOK_ENABLED, actor=actor_name(request), target=f"webhook:{row.id}"
    )
    return web.json_response({"success": True, "id": row.id})


@routes.route(
    "POST",
    "/api/admin/webhooks/{webhook_id}/rotate-secret",
    summary="Sign with a new secret from now on (shown once, in this answer)",
    request=RotateSecretRequest,
    response=WebhookCreated,
    auth="api",
    errors={**_NOT_FOUND, 400: "A secret under 16 characters"},
)
async def rotate_webhook_secret(request: web.Request) -> web.StreamResponse:
    row = await _own_subscription(request)
    body = await parse_body(request, RotateSecretRequest)
    secret = body.secret or new_secret()
    store = request.app[keys.STORE]
    rotated = await store.webhooks.set_secret(row.id, secret)
    if rotated is None:  # removed meanwhile
        raise _no_such_webhook(str(row.id))
    await _reload(request)
    await request.app[keys.AUDIT].record(
        AuditKind.WEBHOOK_SECRET_ROTATED,
        actor=actor_name(request),
        target=f"webhook:{row.id}",
        secret_hint=masked(secret),
    )
    return web.json_response({**subscription_view(rotated), "secret": secret})


@routes.route(
    "POST",
    "/api/admin/webhooks/{webhook_id}/test",
    summary="Send a webhook.test event to this subscription now",
    response=WebhookActionResponse,
    auth="api",
    errors=_NOT_FOUND,
)
async def test_webhook(request: web.Request) -> web.StreamResponse:
    row = await _own_subscription(request)
    outbox = request.app[keys.WEBHOOKS]
    data = {"message": f"a test of webhook {row.id} from {actor_name(request)}"}
    event_id = await request.app[keys.STORE].atomically(
        lambda repos: outbox.stage_test(repos, row.id, data)
    )
    _kick(request)
    return web.json_response({"success": True, "id": row.id, "event_id": event_id})


def _kick(request: web.Request) -> None:
    sender = request.app.get(keys.WEBHOOK_SENDER)
    if sender is not None:
        sender.kick()


@routes.route(
    "GET",
    "/api/admin/webhooks/{webhook_id}/deliveries",
    summary="A subscription's delivery log, newest first: attempts, status codes, latency",
    query=DeliveryListQuery,
    response=DeliveryListResponse,
    auth="api",
    errors=_NOT_FOUND,
)
async def list_deliveries(request: web.Request) -> web.StreamResponse:
    row = await _own_subscription(request)
    query = parse_query(request, DeliveryListQuery)
    store = request.app[keys.STORE]
    found = await store.webhooks.deliveries(row.id, query.limit, query.offset)
    attempts = await store.webhooks.attempts([d.id for d, _, _ in found])
    by_delivery: dict[int, list[dict[str, Any]]] = {}
    for attempt in attempts:
        by_delivery.setdefault(attempt.delivery_id, []).append(attempt_view(attempt))
    deliveries = [
        {**delivery_view(d, kind, event_id), "log": by_delivery.get(d.id, [])}
        for d, kind, event_id in found
    ]
    return web.json_response({"webhook": subscription_view(row), "deliveries": deliveries})


@routes.route(
    "POST",
    "/api/admin/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver",
    summary="Send a delivery again now, with the same X-Tunefleet-Delivery id",
    response=WebhookActionResponse,
    auth="api",
    errors=_NOT_FOUND,
)
async def redeliver(request: web.Request) -> web.StreamResponse:
    row = await _own_subscription(request)
    delivery_id = request.match_info["delivery_id"]
    if row.disabled_at is not None:
        raise ApiError(
            409,
            f"webhook {row.id} is disabled ({row.disabled_reason}); enable it first "
            f"(tunefleet webhooks enable {row.id})",
        )
    now = request.app[keys.CLOCK].time()
    if not await request.app[keys.STORE].webhooks.redeliver(row.id, delivery_id, now):
        raise ApiError(404, f"No delivery {delivery_id} of webhook {row.id}")
    await request.app[keys.AUDIT].record(
        AuditKind.WEBHOOK_REDELIVERED,
        actor=actor_name(request),
        target=f"webhook:{row.id}",
        delivery_id=delivery_id,
    )
    _kick(request)
    return web.json_response({"success": True, "id": row.id})
