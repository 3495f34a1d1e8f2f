"""Webhook subscriptions, the outbox of events, deliveries and the delivery log (issue
27). Synchronous repository for the DB thread (the outbox's rows are written inside the
transaction of the change they describe: webhooks/outbox.py), and the awaited facade the
routes and the sender use."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import peewee as pw

from tunefleet.storage.models import (
    Job,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEvent,
    WebhookSubscription,
    Worker,
    database_proxy,
)
from tunefleet.storage.rows import first_of, inserted, rows_of
from tunefleet.storage.statements import execute_planned, insert_row, select_where
from tunefleet.storage.store_base import Connector, Now, page
from tunefleet.webhooks.policy import DeliveryState

PENDING, DELIVERED, FAILED = DeliveryState.PENDING, DeliveryState.DELIVERED, DeliveryState.FAILED


@dataclass(frozen=True, slots=True)
class WebhookSubscriptionRow:
    id: int
    url: str
    secret: str
    events: list[str]
    team_name: str | None
    user_name: str | None
    worker_labels: dict[str, str]
    format: str
    owner: str | None
    created_by: str
    created_at: float
    disabled_at: float | None
    disabled_reason: str | None


@dataclass(frozen=True, slots=True)
class WebhookEventRow:
    id: int
    event_id: str
    kind: str
    body: dict[str, Any]
    created_at: float


@dataclass(frozen=True, slots=True)
class WebhookDeliveryRow:
    id: int
    delivery_id: str
    event_id: int
    subscription_id: int
    state: str
    attempts: int
    next_at: float
    created_at: float
    last_status: int | None
    last_error: str | None
    last_latency_ms: float | None
    delivered_at: float | None


@dataclass(frozen=True, slots=True)
class WebhookAttemptRow:
    id: int
    delivery_id: int
    at: float
    status_code: int | None
    latency_ms: float
    error: str | None


@dataclass(frozen=True, slots=True)
class DueDelivery:
    """What the sender needs for one attempt: the delivery, its event, its subscription."""

    delivery: WebhookDeliveryRow
    event: WebhookEventRow
    subscription: WebhookSubscriptionRow


@dataclass(frozen=True, slots=True)
class AttemptResult:
    at: float
    status_code: int | None
    latency_ms: float
    error: str | None
    state: str
    next_at: float | None


def new_delivery_id() -> str:
    return f"d_{uuid.uuid4().hex}"


def new_event_id() -> str:
    return f"ev_{uuid.uuid4().hex}"


JOB_FACTS = (
    "id",
    "name",
    "config_name",
    "state",
    "user_name",
    "team_name",
    "worker_id",
    "attempts",
    "submitted_at",
    "started_at",
    "finished_at",
    "error",
    "progress",
)
WORKER_FACTS = ("id", "name", "state", "labels", "gpu_count", "gpu_name")


def _one(model: type[pw.Model], columns: tuple[str, ...], key: str) -> dict[str, Any] | None:
    found = select_where(model, columns, equal={"id": key})
    if not found:
        return None
    fields = model._meta.fields
    return {
        name: fields[name].python_value(value) if value is not None else None
        for name, value in zip(columns, found[0], strict=True)
    }


_DELIVERY_COLUMNS = (
    "delivery_id",
    "event_id",
    "subscription_id",
    "state",
    "attempts",
    "next_at",
    "created_at",
)
_MULTI_INSERT: dict[tuple[type, int], str] = {}
_JOB_FACTS_SQL: dict[type, str] = {}


def _insert_deliveries(event_pk: int, subscription_ids: Sequence[int], at: float) -> None:
    """One pending delivery per subscription in ONE statement, its SQL built once per
    count: it runs in a job step's commit, where each statement is a round trip on
    PostgreSQL and peewee building an INSERT costs more than running it."""
    db = database_proxy.obj
    if db is None:
        raise AttributeError("storage statements only run on the database thread")
    key = (type(db), len(subscription_ids))
    sql = _MULTI_INSERT.get(key)
    if sql is None:
        quote = db.quote
        columns = ", ".join(f"{quote[0]}{c}{quote[1]}" for c in _DELIVERY_COLUMNS)
        row = "(" + ", ".join([db.param] * len(_DELIVERY_COLUMNS)) + ")"
        values = ", ".join([row] * len(subscription_ids))
        table = f"{quote[0]}{WebhookDelivery._meta.table_name}{quote[1]}"
        sql = _MULTI_INSERT[key] = f"INSERT INTO {table} ({columns}) VALUES {values}"
    params: list[Any] = []
    for sub_id in subscription_ids:
        params += [new_delivery_id(), event_pk, sub_id, PENDING, 0, at, at]
    execute_planned(db, sql, params)


class WebhookRepo:
    def __init__(self, now: Now) -> None:
        self._now = now

    # --- subscriptions ------------------------------------------------------------------

    def add_subscription(self, values: Mapping[str, Any]) -> WebhookSubscriptionRow:
        stored = insert_row(WebhookSubscription, {**values, "created_at": self._now()})
        return inserted(WebhookSubscriptionRow, WebhookSubscription, stored)

    def subscriptions(self) -> list[WebhookSubscriptionRow]:
        query = WebhookSubscription.select().order_by(WebhookSubscription.id)
        return rows_of(WebhookSubscriptionRow, query)

    def subscription(self, sub_id: int) -> WebhookSubscriptionRow | None:
        query = WebhookSubscription.select().where(WebhookSubscription.id == sub_id)
        return first_of(WebhookSubscriptionRow, query)

    def delete_subscription(self, sub_id: int) -> bool:
        deliveries = WebhookDelivery.select(WebhookDelivery.id).where(
            WebhookDelivery.subscription == sub_id
        )
        WebhookAttempt.delete().where(WebhookAttempt.delivery.in_(deliveries)).execute()
        WebhookDelivery.delete().where(WebhookDelivery.subscription == sub_id).execute()
        gone = WebhookSubscription.delete().where(WebhookSubscription.id == sub_id).execute()
        return bool(gone)

    def set_secret(self, sub_id: int, secret: str) -> WebhookSubscriptionRow | None:
        """The subscription with its new signing secret; None if there is none."""
        WebhookSubscription.update(secret=secret).where(WebhookSubscription.id == sub_id).execute()
        return self.subscription(sub_id)

    def set_disabled(self, sub_id: int, reason: str | None) -> bool:
        """Disable (``reason``) or enable (None) a subscription. Disabling fails its
        pending deliveries, so nothing is sent to a receiver that said it is gone."""
        at = self._now() if reason is not None else None
        changed = (
            WebhookSubscription.update(disabled_at=at, disabled_reason=reason)
            .where(WebhookSubscription.id == sub_id)
            .execute()
        )
        if changed and reason is not None:
            WebhookDelivery.update(state=FAILED, last_error=reason).where(
                (WebhookDelivery.subscription == sub_id) & (WebhookDelivery.state == PENDING)
            ).execute()
        return bool(changed)

    # --- the outbox ---------------------------------------------------------------------

    def job_facts(self, job_id: str) -> dict[str, Any] | None:
        """The job's columns an event tells (JOB_FACTS) and its worker's name and labels
        (``worker_name``, ``worker_labels``), in one cached SELECT: this runs in a job
        step's commit, where peewee building a whole row's SELECT cost more than the
        rest of the event together, and each query is a round trip on PostgreSQL."""
        db = database_proxy.obj
        if db is None:
            raise AttributeError("storage statements only run on the database thread")
        sql = _JOB_FACTS_SQL.get(type(db))
        if sql is None:
            q = db.quote
            names = ", ".join(f"j.{q[0]}{Job._meta.fields[c].column_name}{q[1]}" for c in JOB_FACTS)
            sql = _JOB_FACTS_SQL[type(db)] = (
                f"SELECT {names}, w.{q[0]}name{q[1]}, w.{q[0]}labels{q[1]} "
                f"FROM {q[0]}job{q[1]} j LEFT JOIN {q[0]}worker{q[1]} w "
                f"ON w.{q[0]}id{q[1]} = j.{q[0]}worker_id{q[1]} WHERE j.{q[0]}id{q[1]} = {db.param}"
            )
        found = execute_planned(db, sql, [job_id]).fetchone()
        if found is None:
            return None
        fields = Job._meta.fields
        facts = {
            name: fields[name].python_value(value) if value is not None else None
            for name, value in zip(JOB_FACTS, found, strict=False)
        }
        labels = found[len(JOB_FACTS) + 1]
        facts["worker_name"] = found[len(JOB_FACTS)]
        facts["worker_labels"] = Worker.labels.python_value(labels) if labels else {}
        return facts

    def worker_facts(self, worker_id: str) -> dict[str, Any] | None:
        return _one(Worker, WORKER_FACTS, worker_id)

    def add_event(
        self,
        kind: str,
        body: Mapping[str, Any],
        subscription_ids: Sequence[int],
        *,
        event_id: str,
        at: float,
    ) -> int:
        """The event and one pending delivery per subscription; the event's row id."""
        values = {"event_id": event_id, "kind": kind, "body": dict(body), "created_at": at}
        row_id = int(insert_row(WebhookEvent, values)["id"])
        if subscription_ids:
            _insert_deliveries(row_id, subscription_ids, at)
        return row_id

    def due(
        self, now: float, limit: int, skip: Sequence[int] = (), busy: Sequence[int] = ()
    ) -> list[DueDelivery]:
        """Up to ``limit`` pending deliveries due by ``now``, oldest first, but those in
        ``skip`` (in flight already) and those of the subscriptions in ``busy``."""
        where = (WebhookDelivery.state == PENDING) & (WebhookDelivery.next_at <= now)
        if busy:
            where &= WebhookDelivery.subscription.not_in(list(busy))
        query = (
            WebhookDelivery.select()
            .where(where)
            .order_by(WebhookDelivery.next_at, WebhookDelivery.id)
            .limit(page(limit, 0)[0] + len(skip))
        )
        deliveries = [d for d in rows_of(WebhookDeliveryRow, query) if d.id not in set(skip)]
        return self._joined(deliveries[:limit])

    def _joined(self, deliveries: list[WebhookDeliveryRow]) -> list[DueDelivery]:
        if not deliveries:
            return []
        event_ids = {d.event_id for d in deliveries}
        events = {
            e.id: e
            for e in rows_of(
                WebhookEventRow, WebhookEvent.select().where(WebhookEvent.id.in_(event_ids))
            )
        }
        subs = {s.id: s for s in self.subscriptions()}
        return [
            DueDelivery(d, events[d.event_id], subs[d.subscription_id])
            for d in deliveries
            if d.event_id in events and d.subscription_id in subs
        ]

    def record_attempt(self, delivery_pk: int, result: AttemptResult) -> bool:
        """An attempt's answer in the log, and the delivery's state after it."""
        changes: dict[str, Any] = {
            "state": result.state,
            "attempts": WebhookDelivery.attempts + 1,
            "last_status": result.status_code,
            "last_error": result.error,
            "last_latency_ms": result.latency_ms,
        }
        if result.next_at is not None:
            changes["next_at"] = result.next_at
        if result.state == DELIVERED:
            changes["delivered_at"] = result.at
        changed = (
            WebhookDelivery.update(**changes)
            .where((WebhookDelivery.id == delivery_pk) & (WebhookDelivery.state == PENDING))
            .execute()
        )
        if changed:
            insert_row(
                WebhookAttempt,
                {
                    "delivery": delivery_pk,
                    "at": result.at,
                    "status_code": result.status_code,
                    "latency_ms": result.latency_ms,
                    "error": result.error,
                },
            )
        return bool(changed)

    # --- the delivery log ---------------------------------------------------------------

    def deliveries(
        self, sub_id: int, limit: int, offset: int = 0
    ) -> list[tuple[WebhookDeliveryRow, str, str]]:
        """A subscription's deliveries, newest first, each with its event's kind and id."""
        limit, offset = page(limit, offset)
        query = (
            WebhookDelivery.select()
            .where(WebhookDelivery.subscription == sub_id)
            .order_by(WebhookDelivery.id.desc())
            .limit(limit)
            .offset(offset)
        )
        rows = rows_of(WebhookDeliveryRow, query)
        events = (
            {
                e.id: e
                for e in rows_of(
                    WebhookEventRow,
                    WebhookEvent.select().where(WebhookEvent.id.in_({r.event_id for r in rows})),
                )
            }
            if rows
            else {}
        )
        return [
            (r, events[r.event_id].kind, events[r.event_id].event_id)
            for r in rows
            if r.event_id in events
        ]

    def attempts(self, delivery_pks: Sequence[int]) -> list[WebhookAttemptRow]:
        if not delivery_pks:
            return []
        query = (
            WebhookAttempt.select()
            .where(WebhookAttempt.delivery.in_(list(delivery_pks)))
            .order_by(WebhookAttempt.id)
        )
        return rows_of(WebhookAttemptRow, query)

    def redeliver(self, sub_id: int, delivery_id: str, now: float) -> bool:
        """Send a delivery again at once (same idempotency id), whatever its state."""
        changed = (
            WebhookDelivery.update(state=PENDING, next_at=now, created_at=now)
            .where(
                (WebhookDelivery.subscription == sub_id)
                & (WebhookDelivery.delivery_id == delivery_id)
            )
            .execute()
        )
        return bool(changed)

    def prune(self, before: float, limit: int) -> int:
        """Forget up to ``limit`` finished (delivered or failed) deliveries made before
        ``before``, their attempts, and events left with no delivery; how many."""
        old = [
            row.id
            for row in WebhookDelivery.select(WebhookDelivery.id)
            .where((WebhookDelivery.state != PENDING) & (WebhookDelivery.created_at < before))
            .order_by(WebhookDelivery.id)
            .limit(limit)
        ]
        if not old:
            return 0
        WebhookAttempt.delete().where(WebhookAttempt.delivery.in_(old)).execute()
        WebhookDelivery.delete().where(WebhookDelivery.id.in_(old)).execute()
        kept = WebhookDelivery.select(WebhookDelivery.event)
        WebhookEvent.delete().where(
            (WebhookEvent.created_at < before) & WebhookEvent.id.not_in(kept)
        ).execute()
        return len(old)


class WebhookRecords:
    """The webhook rows, awaited from the event loop (one DB read or write each)."""

    def __init__(self, db: Connector, repo: WebhookRepo) -> None:
        self.db = db
        self.repo = repo

    async def add_subscription(self, values: Mapping[str, Any]) -> WebhookSubscriptionRow:
        return await self.db.write(partial(self.repo.add_subscription, dict(values)))

    async def subscriptions(self) -> list[WebhookSubscriptionRow]:
        return await self.db.read(self.repo.subscriptions)

    async def subscription(self, sub_id: int) -> WebhookSubscriptionRow | None:
        return await self.db.read(partial(self.repo.subscription, sub_id))

    async def delete_subscription(self, sub_id: int) -> bool:
        return await self.db.write(partial(self.repo.delete_subscription, sub_id))

    async def set_disabled(self, sub_id: int, reason: str | None) -> bool:
        return await self.db.write(partial(self.repo.set_disabled, sub_id, reason))

    async def set_secret(self, sub_id: int, secret: str) -> WebhookSubscriptionRow | None:
        return await self.db.write(partial(self.repo.set_secret, sub_id, secret))

    async def due(
        self, now: float, limit: int, skip: Sequence[int] = (), busy: Sequence[int] = ()
    ) -> list[DueDelivery]:
        return await self.db.read(partial(self.repo.due, now, limit, tuple(skip), tuple(busy)))

    async def record_attempt(self, delivery_pk: int, result: AttemptResult) -> bool:
        return await self.db.write(partial(self.repo.record_attempt, delivery_pk, result))

    async def deliveries(
        self, sub_id: int, limit: int = 50, offset: int = 0
    ) -> list[tuple[WebhookDeliveryRow, str, str]]:
        return await self.db.read(partial(self.repo.deliveries, sub_id, limit, offset))

    async def attempts(self, delivery_pks: Sequence[int]) -> list[WebhookAttemptRow]:
        return await self.db.read(partial(self.repo.attempts, tuple(delivery_pks)))

    async def redeliver(self, sub_id: int, delivery_id: str, now: float) -> bool:
        return await self.db.write(partial(self.repo.redeliver, sub_id, delivery_id, now))

    async def prune(self, before: float, limit: int) -> int:
        return await self.db.write(partial(self.repo.prune, before, limit))
