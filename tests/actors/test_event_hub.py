"""The live events hub: who is listening decides what is worth building."""

from __future__ import annotations

from tunefleet.actors.events import EventHub


def test_wants_a_kind_only_while_a_subscriber_takes_it() -> None:
    hub = EventHub()
    assert not hub.wants("worker")
    with hub.subscribe(frozenset({"job"})):
        assert hub.wants("job")
        assert not hub.wants("worker")
        with hub.subscribe():  # every kind
            assert hub.wants("worker")
        assert not hub.wants("worker")
    assert not hub.wants("job")


def test_an_event_published_while_wanted_reaches_the_subscriber() -> None:
    hub = EventHub()
    with hub.subscribe(frozenset({"worker"})) as sub:
        assert hub.wants("worker")
        hub.publish("worker", worker={"worker_id": "w_1"})
        assert sub.queue.get_nowait().data == {"worker": {"worker_id": "w_1"}}
