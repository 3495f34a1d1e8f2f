"""In-memory webhooks: store_webhooks' repository over memory_tables, keeping its
contract (same arguments and answers)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from tunefleet.storage.memory_tables import Tables, fresh
from tunefleet.storage.models import (
    WebhookAttempt,
    WebhookDelivery,
    WebhookEvent,
    WebhookSubscription,
)
from tunefleet.storage.store_base import Now, page
from tunefleet.storage.store_webhooks import (
    DELIVERED,
    FAILED,
    JOB_FACTS,
    PENDING,
    WORKER_FACTS,
    AttemptResult,
    DueDelivery,
    WebhookAttemptRow,
    WebhookDeliveryRow,
    WebhookEventRow,
    WebhookRepo,
    WebhookSubscriptionRow,
    new_delivery_id,
)


class MemoryWebhookRepo(WebhookRepo):
    def __init__(self, now: Now, tables: Tables) -> None:
        self._now = now
        self._t = tables

    def add_subscription(self, values: Mapping[str, Any]) -> WebhookSubscriptionRow:
        row = self._t.insert(
            "webhook_subscriptions",
            WebhookSubscriptionRow,
            WebhookSubscription,
            {**values, "created_at": self._now()},
        )
        return fresh(row)

    def subscriptions(self) -> list[WebhookSubscriptionRow]:
        return [fresh(row) for _, row in sorted(self._t.webhook_subscriptions.items())]

    def subscription(self, sub_id: int) -> WebhookSubscriptionRow | None:
        row = self._t.webhook_subscriptions.get(sub_id)
        return fresh(row) if row is not None else None

    def delete_subscription(self, sub_id: int) -> bool:
        gone = [k for k, d in self._t.webhook_deliveries.items() if d.subscription_id == sub_id]
        for key in gone:
            del self._t.webhook_deliveries[key]
        for key, a in list(self._t.webhook_attempts.items()):
            if a.delivery_id in gone:
                del self._t.webhook_attempts[key]
        return self._t.webhook_subscriptions.pop(sub_id, None) is not None

    def set_secret(self, sub_id: int, secret: str) -> WebhookSubscriptionRow | None:
        row = self._t.webhook_subscriptions.get(sub_id)
        if row is None:
            return None
        self._t.webhook_subscriptions[sub_id] = replace(row, secret=secret)
        return fresh(self._t.webhook_subscriptions[sub_id])

    def set_disabled(self, sub_id: int, reason: str | None) -> bool:
        row = self._t.webhook_subscriptions.get(sub_id)
        if row is None:
            return False
        at = self._now() if reason is not None else None
        self._t.webhook_subscriptions[sub_id] = replace(row, disabled_at=at, disabled_reason=reason)
        if reason is not None:
            for key, d in list(self._t.webhook_deliveries.items()):
                if d.subscription_id == sub_id and d.state == PENDING:
                    self._t.webhook_deliveries[key] = replace(d, state=FAILED, last_error=reason)
        return True

    def job_facts(self, job_id: str) -> dict[str, Any] | None:
        row = self._t.jobs.get(job_id)
        if row is None:
            return None
        facts = {name: copy.deepcopy(getattr(row, name)) for name in JOB_FACTS}
        worker = self._t.workers.get(row.worker_id) if row.worker_id else None
        facts["worker_name"] = worker.name if worker else None
        facts["worker_labels"] = dict(worker.labels) if worker else {}
        return facts

    def worker_facts(self, worker_id: str) -> dict[str, Any] | None:
        row = self._t.workers.get(worker_id)
        return {name: copy.deepcopy(getattr(row, name)) for name in WORKER_FACTS} if row else None

    def add_event(
        self,
        kind: str,
        body: Mapping[str, Any],
        subscription_ids: Sequence[int],
        *,
        event_id: str,
        at: float,
    ) -> int:
        values = {"event_id": event_id, "kind": kind, "body": dict(body), "created_at": at}
        event = self._t.insert("webhook_events", WebhookEventRow, WebhookEvent, values)
        for sub_id in subscription_ids:
            delivery = {
                "delivery_id": new_delivery_id(),
                "event": event.id,
                "subscription": sub_id,
                "state": PENDING,
                "attempts": 0,
                "next_at": at,
                "created_at": at,
            }
            self._t.insert("webhook_deliveries", WebhookDeliveryRow, WebhookDelivery, delivery)
        return int(event.id)

    def due(
        self, now: float, limit: int, skip: Sequence[int] = (), busy: Sequence[int] = ()
    ) -> list[DueDelivery]:
        waiting = sorted(
            (
                d
                for d in self._t.webhook_deliveries.values()
                if d.state == PENDING
                and d.next_at <= now
                and d.id not in set(skip)
                and d.subscription_id not in set(busy)
            ),
            key=lambda d: (d.next_at, d.id),
        )
        out = []
        for d in waiting[: page(limit, 0)[0]]:
            event = self._t.webhook_events.get(d.event_id)
            sub = self._t.webhook_subscriptions.get(d.subscription_id)
            if event is not None and sub is not None:
                out.append(DueDelivery(fresh(d), fresh(event), fresh(sub)))
        return out

    def record_attempt(self, delivery_pk: int, result: AttemptResult) -> bool:
        d = self._t.webhook_deliveries.get(delivery_pk)
        if d is None or d.state != PENDING:
            return False
        self._t.webhook_deliveries[delivery_pk] = replace(
            d,
            state=result.state,
            attempts=d.attempts + 1,
            last_status=result.status_code,
            last_error=result.error,
            last_latency_ms=result.latency_ms,
            next_at=result.next_at if result.next_at is not None else d.next_at,
            delivered_at=result.at if result.state == DELIVERED else d.delivered_at,
        )
        values = {
            "delivery": delivery_pk,
            "at": result.at,
            "status_code": result.status_code,
            "latency_ms": result.latency_ms,
            "error": result.error,
        }
        self._t.insert("webhook_attempts", WebhookAttemptRow, WebhookAttempt, values)
        return True

    def deliveries(
        self, sub_id: int, limit: int, offset: int = 0
    ) -> list[tuple[WebhookDeliveryRow, str, str]]:
        limit, offset = page(limit, offset)
        rows = sorted(
            (d for d in self._t.webhook_deliveries.values() if d.subscription_id == sub_id),
            key=lambda d: -d.id,
        )[offset : offset + limit]
        out = []
        for d in rows:
            event = self._t.webhook_events.get(d.event_id)
            if event is not None:
                out.append((fresh(d), event.kind, event.event_id))
        return out

    def attempts(self, delivery_pks: Sequence[int]) -> list[WebhookAttemptRow]:
        wanted = set(delivery_pks)
        return [
            fresh(a) for _, a in sorted(self._t.webhook_attempts.items()) if a.delivery_id in wanted
        ]

    def redeliver(self, sub_id: int, delivery_id: str, now: float) -> bool:
        for key, d in self._t.webhook_deliveries.items():
            if d.subscription_id == sub_id and d.delivery_id == delivery_id:
                self._t.webhook_deliveries[key] = replace(
                    d, state=PENDING, next_at=now, created_at=now
                )
                return True
        return False

    def prune(self, before: float, limit: int) -> int:
        old = sorted(
            d.id
            for d in self._t.webhook_deliveries.values()
            if d.state != PENDING and d.created_at < before
        )[:limit]
        for key in old:
            del self._t.webhook_deliveries[key]
        for key, attempt in list(self._t.webhook_attempts.items()):
            if attempt.delivery_id in old:
                del self._t.webhook_attempts[key]
        kept = {d.event_id for d in self._t.webhook_deliveries.values()}
        for key, event in list(self._t.webhook_events.items()):
            if event.created_at < before and key not in kept:
                del self._t.webhook_events[key]
        return len(old)
