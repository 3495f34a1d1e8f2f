"""Webhook rows (issue 27) on SQLite, PostgreSQL and in memory, held to one contract: the
outbox's events and deliveries, the sender's page of due ones, attempts and their log,
redelivery, a new secret, disabling (which fails what is pending) and removal (which takes
the log)."""

from __future__ import annotations

from typing import Any

from tunefleet.storage.database import Database
from tunefleet.storage.memory import memory_store
from tunefleet.storage.store import Store
from tunefleet.storage.store_webhooks import AttemptResult

SUB = {"secret": "whsec_" + "s" * 20, "events": ["job.completed"], "created_by": "admin"}


async def _scenario(store: Store) -> dict[str, Any]:
    hooks = store.webhooks
    one = await hooks.add_subscription({**SUB, "url": "https://a.example.com/1"})
    two = await hooks.add_subscription(
        {**SUB, "url": "https://b.example.com/2", "format": "slack", "worker_labels": {"p": "x"}}
    )
    body = {"type": "job.completed", "data": {"job_id": "j_1"}}
    for event_id, at in (("ev_1", 10.0), ("ev_2", 20.0)):
        await store.atomically(
            lambda repos, e=event_id, t=at: repos.webhooks.add_event(
                "job.completed", body, [one.id, two.id], event_id=e, at=t
            )
        )
    due = await hooks.due(15.0, 10)
    not_busy = await hooks.due(100.0, 10, busy=[one.id])
    first = due[0]
    retry = AttemptResult(16.0, 503, 12.5, "HTTP 503", "pending", 40.0)
    assert await hooks.record_attempt(first.delivery.id, retry)
    done = AttemptResult(41.0, 200, 3.0, None, "delivered", None)
    assert await hooks.record_attempt(first.delivery.id, done)
    assert not await hooks.record_attempt(first.delivery.id, done)  # no longer pending
    log = await hooks.deliveries(first.subscription.id)
    attempts = await hooks.attempts([d.id for d, _, _ in log])
    again = await hooks.redeliver(first.subscription.id, first.delivery.delivery_id, 50.0)
    after_redeliver = (await hooks.deliveries(first.subscription.id))[-1][0]
    rotated = await hooks.set_secret(two.id, "whsec_" + "n" * 20)
    no_such = await hooks.set_secret(999, "whsec_" + "n" * 20)
    assert await hooks.set_disabled(two.id, "gone")
    disabled = await hooks.subscription(two.id)
    two_states = sorted(d.state for d, _, _ in await hooks.deliveries(two.id))
    assert await hooks.delete_subscription(one.id)
    pruned_early = await hooks.prune(15.0, 100)  # ev_1's failed delivery only
    pruned = await hooks.prune(1000.0, 100)
    left_log = await hooks.deliveries(two.id)
    await store.create_worker("w_1", name="gpu-1", worker_type="persistent", labels={"p": "x"})
    await store.create_job(
        "j_1",
        config={},
        name="tiny",
        worker_id="w_1",
        user_name="alice",
        progress={"loss": 0.5},
        submitted_at=5.0,
    )
    facts = (
        await store.db.read(lambda: store.repos.webhooks.job_facts("j_1")),
        await store.db.read(lambda: store.repos.webhooks.worker_facts("w_1")),
        await store.db.read(lambda: store.repos.webhooks.job_facts("j_none")),
    )
    return {
        "facts": facts,
        "pruned": (pruned_early, pruned, left_log),
        "subs": [(s.url, s.format, s.worker_labels, s.events) for s in [one, two]],
        "due": [(d.event.event_id, d.subscription.url, d.event.body) for d in due],
        "not_busy": sorted((d.event.event_id, d.subscription.url) for d in not_busy),
        "log": [(d.state, d.attempts, d.last_status, kind, ev) for d, kind, ev in log],
        "attempts": [(a.status_code, a.latency_ms, a.error) for a in attempts],
        "redelivered": (again, after_redeliver.state, after_redeliver.next_at),
        "disabled": (disabled.disabled_reason if disabled else None, two_states),
        "rotated": (rotated.secret if rotated else None, no_such),
        "left": [s.id for s in await hooks.subscriptions()],
        "one_log_after_delete": await hooks.deliveries(one.id),
    }


async def test_webhook_rows_keep_one_contract_on_every_backend(db: Database) -> None:
    stored = await _scenario(Store(db))
    assert stored == await _scenario(memory_store())
    assert stored["due"][0][0] == "ev_1" and len(stored["due"]) == 2  # ev_2 not yet due
    assert stored["not_busy"] == [
        ("ev_1", "https://b.example.com/2"),
        ("ev_2", "https://b.example.com/2"),
    ]
    assert stored["log"][-1] == ("delivered", 2, 200, "job.completed", "ev_1")
    assert stored["attempts"] == [(503, 12.5, "HTTP 503"), (200, 3.0, None)]
    assert stored["redelivered"] == (True, "pending", 50.0)
    assert stored["disabled"] == ("gone", ["failed", "failed"])
    assert stored["rotated"] == ("whsec_" + "n" * 20, None)
    assert stored["left"] == [2] and stored["one_log_after_delete"] == []
    job, worker, missing = stored["facts"]
    assert (job["name"], job["user_name"], job["progress"], job["state"]) == (
        "tiny",
        "alice",
        {"loss": 0.5},
        "pending",
    )
    assert (worker["name"], worker["labels"], missing) == ("gpu-1", {"p": "x"}, None)
    assert (job["worker_name"], job["worker_labels"]) == ("gpu-1", {"p": "x"})
    assert stored["pruned"] == (1, 1, [])  # two's failed deliveries, by their age
