"""The actor runtime: ordering, ask/tell, crashes and restarts, stopping."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from structlog.testing import capture_logs

from tunefleet.actors.clock import FakeClock
from tunefleet.actors.runtime import (
    LATER,
    Actor,
    ActorError,
    ActorStopped,
    ActorSystem,
    AskTimeout,
    check_message,
)
from tunefleet.errors import Conflict


@dataclass(frozen=True)
class Note:
    value: int = 0


@dataclass(frozen=True)
class Boom:
    """receive raises ValueError: a crash."""


@dataclass(frozen=True)
class Refuse:
    """receive raises Conflict: a deliberate refusal, not a crash."""


@dataclass(frozen=True)
class Block:
    """receive waits until the test opens the gate."""


@dataclass
class Mutable:
    value: int = 0


@dataclass(frozen=True)
class Frozen:
    items: list[int] = field(default_factory=list)


class Recorder(Actor):
    """Records what it handles and every hook call; no __slots__, so it gets a __dict__."""

    def __init__(self, name: str = "recorder") -> None:
        super().__init__(name)
        self.handled: list[object] = []
        self.events: list[str] = []
        self.restarts: list[Exception] = []
        self.gate = asyncio.Event()
        self.busy = 0
        self.max_busy = 0

    async def receive(self, message: object) -> object:
        self.busy += 1
        self.max_busy = max(self.max_busy, self.busy)
        try:
            if isinstance(message, Block):
                self.events.append("blocked")
                await self.gate.wait()
                return "unblocked"
            await asyncio.sleep(0)  # give any overlap a chance to show
            if isinstance(message, Boom):
                raise ValueError("boom")
            if isinstance(message, Refuse):
                raise Conflict("not now")
            self.handled.append(message)
            self.events.append("message")
            return ("ok", message)
        finally:
            self.busy -= 1

    async def on_start(self) -> None:
        self.events.append("start")

    async def on_stop(self) -> None:
        self.events.append("stop")

    async def on_restart(self, error: Exception) -> None:
        self.restarts.append(error)
        self.events.append("restart")


@pytest.fixture(autouse=True)
def quiet_logs() -> Iterator[None]:
    """Rendering crash tracebacks to the console is slow and noisy; tests that check
    logs capture them themselves."""
    with capture_logs():
        yield


def make_system(**kwargs: Any) -> tuple[ActorSystem, FakeClock]:
    clock = FakeClock()
    return ActorSystem(clock, **kwargs), clock


async def settle(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


# --- ordering and concurrency ---------------------------------------------------------


async def test_messages_are_handled_one_at_a_time_in_order() -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder())
    for i in range(50):
        actor.tell(Note(i))
    assert actor.mailbox_size == 50
    assert await actor.ask(Note(50)) == ("ok", Note(50))
    assert actor.handled == [Note(i) for i in range(51)]
    assert actor.max_busy == 1
    assert actor.events[0] == "start"


async def test_actors_run_concurrently() -> None:
    system, _ = make_system()
    a = system.spawn(Recorder("a"))
    b = system.spawn(Recorder("b"))
    a.tell(Block())
    await settle()
    # a is parked inside receive; b must still make progress.
    assert await b.ask(Note(1), timeout_s=2.0) == ("ok", Note(1))
    a.gate.set()
    assert await a.ask(Note(2), timeout_s=2.0) == ("ok", Note(2))


async def test_a_long_mailbox_yields_to_other_actors() -> None:
    class Hog(Actor):
        __slots__ = ("count",)

        def __init__(self) -> None:
            super().__init__("hog")
            self.count = 0

        async def receive(self, message: object) -> object:
            self.count += 1  # never awaits: only the runtime can make it yield
            return None

    system, _ = make_system()
    hog = system.spawn(Hog())
    other = system.spawn(Recorder("other"))
    for _ in range(500):
        hog.tell(Note())
    seen_at = await other.ask(Note())
    assert seen_at == ("ok", Note())
    assert hog.count < 500
    await system.stop_all()
    assert hog.count == 500


async def test_idle_actors_hold_no_task() -> None:
    class Quiet(Actor):
        __slots__ = ()

        async def receive(self, message: object) -> object:
            return None

    system, _ = make_system()
    baseline = len(asyncio.all_tasks())
    actors = [system.spawn(Quiet(f"quiet-{i}")) for i in range(200)]
    assert len(asyncio.all_tasks()) == baseline  # no on_start override: no start task
    for actor in actors:
        actor.tell(Note())
    assert len(asyncio.all_tasks()) == baseline + 200
    await settle()
    assert len(asyncio.all_tasks()) == baseline
    assert all(actor.mailbox_size == 0 and actor.alive for actor in actors)
    assert not hasattr(actors[0], "__dict__")


async def test_idle_actors_give_their_mailbox_back() -> None:
    """A deque costs ~760 bytes; an idle actor must not keep one."""

    class Quiet(Actor):
        __slots__ = ()

        async def receive(self, message: object) -> object:
            return None

    system, _ = make_system()
    names = [f"quiet-{i:04d}" for i in range(1000)]  # built before measuring
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        actors = [system.spawn(Quiet(name)) for name in names]
        for actor in actors:
            actor.tell(Note())
        await settle()
        per_actor = (tracemalloc.get_traced_memory()[0] - before) / len(actors)
    finally:
        tracemalloc.stop()
    assert per_actor < 400, per_actor


# --- ask ----------------------------------------------------------------------------


async def test_ask_reraises_what_receive_raised_and_the_actor_goes_on() -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder())
    with pytest.raises(ValueError, match="boom"):
        await actor.ask(Boom())
    assert await actor.ask(Note(1)) == ("ok", Note(1))


async def test_ask_timeout_names_actor_message_and_timeout_and_leaves_actor_healthy() -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder("slowpoke"))
    actor.tell(Block())
    with pytest.raises(AskTimeout) as caught:
        await actor.ask(Note(7), timeout_s=0.01)
    error = caught.value
    assert (error.actor, error.message_type, error.timeout_s) == ("slowpoke", "Note", 0.01)
    assert str(error) == "actor slowpoke did not answer Note within 0.01 s"
    assert "\n" not in str(error)

    actor.gate.set()
    assert await actor.ask(Note(8), timeout_s=2.0) == ("ok", Note(8))
    # The timed-out message was still handled, in order; only its answer was dropped.
    assert actor.handled == [Note(7), Note(8)]
    assert actor.alive


async def test_a_cancelled_asker_does_not_break_the_actor() -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder())
    actor.tell(Block())
    asker = asyncio.create_task(actor.ask(Note(1)))
    await settle()
    asker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asker
    actor.gate.set()
    assert await actor.ask(Note(2)) == ("ok", Note(2))
    assert actor.handled == [Note(1), Note(2)]


# --- message checks -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "complaint"),
    [
        ({"kind": "note"}, "frozen dataclass instance, not dict"),
        ("note", "frozen dataclass instance, not str"),
        (Note, "frozen dataclass instance, not type"),  # the class, not an instance
        (Mutable(), "Mutable must be declared @dataclass(frozen=True)"),
    ],
)
async def test_only_frozen_dataclass_instances_are_messages(
    message: object, complaint: str
) -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder())
    with pytest.raises(TypeError, match=complaint.replace("(", r"\(").replace(")", r"\)")):
        actor.tell(message)
    with pytest.raises(TypeError):
        await actor.ask(message)
    check_message(Frozen())  # frozen with a mutable field is still a frozen dataclass
    assert actor.mailbox_size == 0


# --- refusals and crashes -----------------------------------------------------------


async def test_a_refusal_goes_to_the_asker_without_counting_as_a_crash() -> None:
    system, _ = make_system(max_restarts=0)
    actor = system.spawn(Recorder())
    with capture_logs() as logs:
        for _ in range(3):
            with pytest.raises(Conflict, match="not now"):
                await actor.ask(Refuse())
        actor.tell(Refuse())
        await actor.ask(Note())
    assert actor.alive
    assert actor.restarts == []
    assert [entry["event"] for entry in logs] == ["actor refused a message"]
    assert logs[0]["log_level"] == "warning"
    assert logs[0]["message_type"] == "Refuse"


async def test_a_crash_is_logged_then_on_restart_then_the_next_message() -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder("fragile"))
    with capture_logs() as logs:
        actor.tell(Boom())
        assert await actor.ask(Note(1)) == ("ok", Note(1))
    assert actor.events == ["start", "restart", "message"]
    assert isinstance(actor.restarts[0], ValueError)
    crash = next(entry for entry in logs if entry["event"] == "actor crashed")
    assert crash["log_level"] == "error"
    assert crash["actor"] == "fragile"
    assert crash["message_type"] == "Boom"
    assert crash["error"] == "ValueError('boom')"
    assert crash["crashes_in_window"] == 1


async def test_too_many_crashes_stop_the_actor_and_reject_queued_asks() -> None:
    failures: list[tuple[Actor, Exception]] = []
    system, _ = make_system(
        max_restarts=2, on_actor_failed=lambda actor, error: failures.append((actor, error))
    )
    actor = system.spawn(Recorder("doomed"))
    actor.tell(Block())
    crash_asks = [asyncio.create_task(actor.ask(Boom())) for _ in range(3)]
    queued_ask = asyncio.create_task(actor.ask(Note(1)))
    await settle()  # the asks are queued behind Block
    actor.tell(Note(2))
    with capture_logs() as logs:
        actor.gate.set()
        results = await asyncio.gather(*crash_asks, queued_ask, return_exceptions=True)

    assert [type(result) for result in results] == [ValueError] * 3 + [ActorStopped]
    assert str(results[3]) == "actor doomed accepts no messages: it failed: too many crashes"
    assert len(actor.restarts) == 2  # the third crash is one more than max_restarts
    assert not actor.alive
    assert actor.handled == []
    assert actor.events[-1] == "stop"
    assert system.get("doomed") is None
    assert failures == [(actor, results[2])]
    failed = next(entry for entry in logs if entry["event"] == "actor failed and was stopped")
    assert failed["log_level"] == "error"
    assert failed["reason"] == "restart limit exceeded"
    dropped = next(entry for entry in logs if entry["event"] == "actor dropped queued messages")
    assert dropped["dropped"] == 2
    with pytest.raises(ActorStopped):
        actor.tell(Note())


async def test_crashes_older_than_the_window_do_not_count() -> None:
    system, clock = make_system(max_restarts=1, restart_window_s=60.0)
    actor = system.spawn(Recorder())
    with pytest.raises(ValueError):
        await actor.ask(Boom())
    await clock.advance(60.0)
    with pytest.raises(ValueError):
        await actor.ask(Boom())
    assert actor.alive  # the first crash left the window
    await clock.advance(59.0)
    with pytest.raises(ValueError):
        await actor.ask(Boom())
    await settle()
    assert not actor.alive  # two crashes within 60 s: more than one restart


async def test_an_async_failure_callback_is_awaited_and_may_respawn_the_name() -> None:
    replacements: list[Recorder] = []

    async def respawn(actor: Actor, error: Exception) -> None:
        await asyncio.sleep(0)
        replacements.append(system.spawn(Recorder(actor.name)))

    system, _ = make_system(max_restarts=0, on_actor_failed=respawn)
    actor = system.spawn(Recorder("phoenix"))
    with pytest.raises(ValueError):
        await actor.ask(Boom())
    await settle()
    assert system.get("phoenix") is replacements[0]
    assert await replacements[0].ask(Note()) == ("ok", Note())


async def test_a_failing_failure_callback_is_logged_not_lost() -> None:
    def broken(actor: Actor, error: Exception) -> None:
        raise RuntimeError("callback bug")

    system, _ = make_system(max_restarts=0, on_actor_failed=broken)
    actor = system.spawn(Recorder())
    with capture_logs() as logs:
        with pytest.raises(ValueError):
            await actor.ask(Boom())
        await settle()
    events = [entry["event"] for entry in logs]
    assert "actor failed and was stopped" in events
    assert "on_actor_failed raised" in events
    assert not actor.alive


async def test_on_restart_that_raises_fails_the_actor() -> None:
    class BadRestart(Recorder):
        async def on_restart(self, error: Exception) -> None:
            raise RuntimeError("cannot recover")

    failures: list[Exception] = []
    system, _ = make_system(on_actor_failed=lambda actor, error: failures.append(error))
    actor = system.spawn(BadRestart())
    with capture_logs() as logs:
        actor.tell(Boom())
        with pytest.raises(ActorStopped, match="on_restart raised"):
            await actor.ask(Note())
    assert not actor.alive
    assert [str(error) for error in failures] == ["cannot recover"]
    failed = next(entry for entry in logs if entry["event"] == "actor failed and was stopped")
    assert failed["reason"] == "on_restart raised"


async def test_unhandled_receive_is_a_crash() -> None:
    system, _ = make_system()
    actor = system.spawn(Actor("bare"))
    with pytest.raises(NotImplementedError, match="must override receive"):
        await actor.ask(Note())
    assert actor.alive


# --- lifecycle hooks ----------------------------------------------------------------


async def test_on_start_failure_fails_the_actor_before_any_message() -> None:
    class BadStart(Recorder):
        async def on_start(self) -> None:
            raise RuntimeError("no database")

    failures: list[Exception] = []
    system, _ = make_system(on_actor_failed=lambda actor, error: failures.append(error))
    actor = system.spawn(BadStart())
    with capture_logs() as logs:
        with pytest.raises(ActorStopped, match="failed to start"):
            await actor.ask(Note())
        await settle()
    assert actor.handled == []
    assert actor.events == ["stop"]
    assert [str(error) for error in failures] == ["no database"]
    assert any(entry.get("reason") == "on_start raised" for entry in logs)


async def test_on_stop_failure_is_logged_and_the_actor_still_stops() -> None:
    class BadStop(Recorder):
        async def on_stop(self) -> None:
            raise RuntimeError("cleanup bug")

    system, _ = make_system()
    actor = system.spawn(BadStop())
    await settle()
    with capture_logs() as logs:
        await actor.stop()
    assert not actor.alive
    assert system.actors == 0
    assert [entry["event"] for entry in logs] == ["actor on_stop failed"]


# --- stopping -----------------------------------------------------------------------


async def test_stop_with_drain_handles_the_full_mailbox_first() -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder())
    actor.tell(Block())
    asks = [asyncio.create_task(actor.ask(Note(i))) for i in range(20)]
    await settle()
    stopping = asyncio.create_task(actor.stop(drain=True))
    await settle()
    assert not actor.alive
    with pytest.raises(ActorStopped):
        actor.tell(Note(99))  # no new work while draining
    actor.gate.set()
    await stopping
    assert [await ask for ask in asks] == [("ok", Note(i)) for i in range(20)]
    assert actor.events[-1] == "stop"
    assert actor.events.count("stop") == 1
    assert system.actors == 0


async def test_stop_without_drain_rejects_the_queue_but_finishes_the_message_in_hand() -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder("busy"))
    in_hand = asyncio.create_task(actor.ask(Block()))
    await settle()
    asks = [asyncio.create_task(actor.ask(Note(i))) for i in range(20)]
    await settle()
    for i in range(20, 30):
        actor.tell(Note(i))
    assert actor.mailbox_size == 30
    with capture_logs() as logs:
        stopping = asyncio.create_task(actor.stop(drain=False))
        await settle()
    assert [(e["event"], e["dropped"]) for e in logs] == [
        ("actor stopped with queued messages", 30)
    ]
    assert not stopping.done()  # waits for the message in hand
    assert actor.mailbox_size == 0
    actor.gate.set()
    await stopping
    assert await in_hand == "unblocked"
    results = await asyncio.gather(*asks, return_exceptions=True)
    assert all(isinstance(result, ActorStopped) for result in results)
    assert str(results[0]) == "actor busy accepts no messages: it was stopped"
    assert actor.handled == []
    assert actor.events == ["start", "blocked", "stop"]


async def test_tell_and_ask_after_stop_raise_actor_stopped() -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder("gone"))
    await settle()  # started and idle: no task left, so stop runs on_stop itself
    await actor.stop()
    await actor.stop()  # idempotent
    with pytest.raises(ActorStopped, match="actor gone accepts no messages"):
        actor.tell(Note())
    with pytest.raises(ActorStopped):
        await actor.ask(Note())
    assert actor.events == ["start", "stop"]


async def test_an_actor_can_stop_itself_from_receive() -> None:
    class Quitter(Recorder):
        async def receive(self, message: object) -> object:
            if isinstance(message, Note) and message.value == 0:
                assert self._system is not None
                self._system.stop_soon(self)
                await self.stop()  # returns at once from inside: no self-deadlock
            return await super().receive(message)

    system, _ = make_system()
    actor = system.spawn(Quitter())
    for i in range(3):
        actor.tell(Note(i))
    await settle()
    assert actor.handled == [Note(0), Note(1), Note(2)]  # stop_soon drains what was queued
    assert actor.events[-1] == "stop"
    with pytest.raises(ActorStopped):
        actor.tell(Note(3))
    assert system.actors == 0


async def test_concurrent_stops_all_wait_for_the_same_end() -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder())
    actor.tell(Block())
    await settle()
    stops = [asyncio.create_task(actor.stop()) for _ in range(3)]
    await settle()
    assert not any(stop.done() for stop in stops)
    actor.gate.set()
    await asyncio.gather(*stops)
    assert actor.events.count("stop") == 1


async def test_stop_all_with_full_mailboxes_both_modes() -> None:
    for drain in (True, False):
        system, _ = make_system()
        actors = [system.spawn(Recorder(f"r{i}")) for i in range(50)]
        asks = [asyncio.create_task(a.ask(Note(i))) for a in actors for i in range(20)]
        await asyncio.sleep(0)  # the asks are queued; the actors have not run yet
        with capture_logs() as logs:
            await system.stop_all(drain=drain)
        # One summary line, not one per actor: shutdown must stay fast with many actors.
        assert [(e["event"], e["dropped"]) for e in logs] == [
            ("stopping all actors", 0 if drain else 1000)
        ]
        results = await asyncio.gather(*asks, return_exceptions=True)
        handled = sum(len(a.handled) for a in actors)
        if drain:
            assert handled == 1000
            assert not any(isinstance(result, BaseException) for result in results)
        else:
            assert handled == 0
            assert all(isinstance(result, ActorStopped) for result in results)
        assert system.actors == 0
        assert all(a.events[-1] == "stop" for a in actors)
        with pytest.raises(ActorStopped, match="shutting down"):
            system.spawn(Recorder("late"))


async def test_a_cancelled_actor_task_answers_everyone_and_stops() -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder("victim"))
    in_hand = asyncio.create_task(actor.ask(Block()))
    queued = asyncio.create_task(actor.ask(Note()))
    await settle()
    (task,) = [t for t in asyncio.all_tasks() if t.get_name() == "victim"]
    task.cancel()
    await settle()
    for ask in (in_hand, queued):
        with pytest.raises(ActorStopped, match="cancelled"):
            await ask
    assert not actor.alive
    assert system.actors == 0


# --- spawning -----------------------------------------------------------------------


async def test_spawn_rules() -> None:
    system, _ = make_system()
    first = system.spawn(Recorder("dup"))
    assert system.get("dup") is first
    assert system.get("missing") is None
    with pytest.raises(ActorError, match="already running"):
        system.spawn(Recorder("dup"))
    with pytest.raises(ActorError, match="spawned or stopped before"):
        system.spawn(first)
    await first.stop()
    second = system.spawn(Recorder("dup"))  # the name is free once stopped
    assert system.get("dup") is second
    assert system.actors == 1
    assert repr(second) == "<Recorder dup running mailbox=0>"


async def test_tell_before_spawn_is_an_error() -> None:
    actor = Recorder("orphan")
    assert not actor.alive
    with pytest.raises(ActorError, match="not spawned"):
        actor.tell(Note())
    await actor.stop()  # stopping an unspawned actor is harmless
    system, _ = make_system()
    with pytest.raises(ActorError, match="spawned or stopped before"):
        system.spawn(actor)


def test_bad_arguments_are_rejected() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="max_restarts"):
        ActorSystem(clock, max_restarts=-1)
    with pytest.raises(ValueError, match="restart_window_s"):
        ActorSystem(clock, restart_window_s=0)
    with pytest.raises(ValueError, match="non-empty name"):
        Actor("")


async def test_timers_on_the_fake_clock_drive_actors() -> None:
    system, clock = make_system()
    actor = system.spawn(Recorder())
    clock.call_later(30.0, lambda: actor.try_tell(Note(1)))
    clock.call_later(60.0, lambda: actor.try_tell(Note(2)))
    clock.call_later(90.0, lambda: actor.try_tell(Note(3)))
    await clock.advance(30.0)
    assert actor.handled == [Note(1)]  # handled before advance returned
    await clock.advance(30.0)
    assert actor.handled == [Note(1), Note(2)]
    await actor.stop()
    await clock.advance(30.0)  # try_tell on a stopped actor: no error, nothing queued
    assert actor.handled == [Note(1), Note(2)]


async def test_try_tell_reports_whether_it_queued() -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder())
    assert actor.try_tell(Note(1)) is True
    with pytest.raises(TypeError):
        actor.try_tell(Mutable())  # a bad message is still a bug, alive or not
    await actor.stop()
    assert actor.try_tell(Note(2)) is False
    assert actor.handled == [Note(1)]
    assert not Recorder("unspawned").try_tell(Note())


# --- answers given at once ----------------------------------------------------------------


@dataclass(frozen=True)
class Quick:
    """Answered by answer_at_once while the actor is idle."""

    value: int = 0
    fail: str = ""  # "crash" or "refuse"


class Eager(Recorder):
    def __init__(self, name: str = "eager") -> None:
        super().__init__(name)
        self.at_once: list[object] = []

    def answer_at_once(self, message: object) -> object:
        if not isinstance(message, Quick):
            return LATER
        if message.fail == "crash":
            raise ValueError("boom at once")
        if message.fail == "refuse":
            raise Conflict("not now")
        self.at_once.append(message)
        return ("at once", message)


async def test_an_idle_actor_answers_at_once_without_a_turn_of_the_loop() -> None:
    system, _ = make_system()
    actor = system.spawn(Eager())
    await settle()  # started: idle
    turns: list[str] = []
    asyncio.get_running_loop().call_soon(turns.append, "turn")
    assert await actor.ask(Quick(1)) == ("at once", Quick(1))
    assert turns == []  # the ask never gave the loop a turn
    assert actor._task is None  # and made no task
    assert actor.at_once == [Quick(1)] and actor.handled == []


async def test_an_ask_answered_at_once_waits_its_turn_behind_queued_messages() -> None:
    system, _ = make_system()
    actor = system.spawn(Eager())
    await settle()
    actor.tell(Block())
    actor.tell(Note(1))
    asker = asyncio.create_task(actor.ask(Quick(2)))
    await settle()
    assert not asker.done()  # busy: the ask went to the mailbox, behind the others
    actor.gate.set()
    assert await asker == ("ok", Quick(2))  # receive answered it, in order
    assert actor.handled == [Note(1), Quick(2)] and actor.at_once == []


async def test_a_message_left_for_later_goes_through_receive() -> None:
    system, _ = make_system()
    actor = system.spawn(Eager())
    await settle()
    assert await actor.ask(Note(3)) == ("ok", Note(3))
    assert actor.handled == [Note(3)] and actor.at_once == []


async def test_a_refusal_given_at_once_goes_to_the_asker_and_is_no_crash() -> None:
    system, _ = make_system()
    actor = system.spawn(Eager())
    await settle()
    with pytest.raises(Conflict, match="not now"):
        await actor.ask(Quick(fail="refuse"))
    await settle()
    assert actor.restarts == [] and actor._task is None
    assert await actor.ask(Quick(4)) == ("at once", Quick(4))


async def test_a_crash_at_once_is_recovered_on_the_actors_task_before_what_follows() -> None:
    system, _ = make_system()
    actor = system.spawn(Eager())
    await settle()
    with pytest.raises(ValueError, match="boom at once"):
        await actor.ask(Quick(fail="crash"))
    actor.tell(Note(5))  # sent while the recovery has not run yet
    await settle()
    assert [str(e) for e in actor.restarts] == ["boom at once"]
    assert actor.events[-2:] == ["restart", "message"]  # recovered, then the next message
    assert actor.alive and actor._task is None


async def test_a_crash_at_once_past_the_restart_limit_stops_the_actor() -> None:
    failures: list[tuple[Actor, Exception]] = []
    system, _ = make_system(
        max_restarts=0, on_actor_failed=lambda actor, error: failures.append((actor, error))
    )
    actor = system.spawn(Eager())
    await settle()
    with pytest.raises(ValueError):
        await actor.ask(Quick(fail="crash"))
    await settle()
    assert not actor.alive and actor.events[-1] == "stop"
    assert [str(error) for _, error in failures] == ["boom at once"]


async def test_a_stopped_actor_answers_nothing_at_once() -> None:
    system, _ = make_system()
    actor = system.spawn(Eager())
    await settle()
    await actor.stop()
    with pytest.raises(ActorStopped):
        await actor.ask(Quick(6))
    assert actor.at_once == []


# --- tells handled at once ------------------------------------------------------------


@dataclass(frozen=True)
class SendSelf:
    """Handled at once; sends the actor itself a Note while it is being handled."""


@dataclass(frozen=True)
class SendTo:
    """Handled at once; tells `other` a Quick(1) whose handling tells this actor Note(2)."""

    other: Actor


@dataclass(frozen=True)
class SendBack:
    """Handled at once; tells `back` Note(2)."""

    back: Actor


@dataclass(frozen=True)
class StopSelf:
    """Handled at once; begins the actor's own stop."""


class Teller(Eager):
    """Eager, and what it does while handling at once: nesting it must never show."""

    def __init__(self, name: str = "teller") -> None:
        super().__init__(name)
        self.depth = 0
        self.max_depth = 0

    def answer_at_once(self, message: object) -> object:
        self.depth += 1
        self.max_depth = max(self.max_depth, self.depth)
        try:
            match message:
                case SendSelf():
                    self.tell(Note(1))
                case SendTo(other=other):
                    other.tell(SendBack(self))
                case SendBack(back=back):
                    back.tell(Note(2))
                case StopSelf():
                    self._owner().stop_soon(self)
                case _:
                    return super().answer_at_once(message)
            self.at_once.append(message)
            return None
        finally:
            self.depth -= 1


async def test_an_idle_actor_handles_a_tell_at_once_without_a_task_or_a_turn() -> None:
    system, _ = make_system()
    actor = system.spawn(Eager())
    await settle()
    turns: list[str] = []
    asyncio.get_running_loop().call_soon(turns.append, "turn")
    actor.tell(Quick(1))
    assert actor.try_tell(Quick(2))
    assert actor.at_once == [Quick(1), Quick(2)] and actor.handled == []
    assert turns == [] and actor._task is None and actor._mailbox is None


async def test_a_tell_to_a_busy_actor_waits_its_turn_in_the_mailbox() -> None:
    system, _ = make_system()
    actor = system.spawn(Eager())
    await settle()
    actor.tell(Block())
    actor.tell(Quick(3))
    await settle()
    assert actor.at_once == []
    actor.gate.set()
    await settle()
    assert actor.handled == [Quick(3)] and actor.at_once == []


async def test_a_message_left_for_later_is_told_through_receive() -> None:
    system, _ = make_system()
    actor = system.spawn(Eager())
    await settle()
    actor.tell(Note(4))
    assert actor.handled == [] and actor._task is not None
    await settle()
    assert actor.handled == [Note(4)] and actor._task is None


async def test_a_refusal_told_at_once_is_logged_and_no_crash() -> None:
    system, _ = make_system()
    actor = system.spawn(Eager())
    await settle()
    with capture_logs() as logs:
        actor.tell(Quick(fail="refuse"))  # the teller hears nothing, as from the mailbox
        await settle()
    refused = [e for e in logs if e["event"] == "actor refused a message"]
    assert refused == [
        {
            "event": "actor refused a message",
            "log_level": "warning",
            "actor": "eager",
            "message_type": "Quick",
            "error": "not now",
        }
    ]
    assert actor.restarts == [] and actor._task is None and actor.alive


async def test_a_crash_told_at_once_is_recovered_before_what_follows() -> None:
    system, _ = make_system()
    actor = system.spawn(Eager())
    await settle()
    actor.tell(Quick(fail="crash"))  # the teller hears nothing, as from the mailbox
    actor.tell(Note(5))  # sent while the recovery has not run yet
    assert actor._task is not None
    await settle()
    assert [str(e) for e in actor.restarts] == ["boom at once"]
    assert actor.events[-2:] == ["restart", "message"]  # recovered, then the next message
    assert actor.alive and actor._task is None


async def test_what_an_actor_sends_itself_while_answering_at_once_waits_for_its_task() -> None:
    system, _ = make_system()
    actor = system.spawn(Teller())
    await settle()
    actor.tell(SendSelf())
    assert actor.at_once == [SendSelf()] and actor.handled == []  # not handled inside
    assert actor._task is not None and actor.mailbox_size == 1
    await settle()
    assert actor.handled == [Note(1)] and actor._task is None and actor._mailbox is None


async def test_a_message_sent_back_while_answering_at_once_waits_for_the_first_to_end() -> None:
    system, _ = make_system()
    a = system.spawn(Teller("a"))
    b = system.spawn(Teller("b"))
    await settle()
    a.tell(SendTo(b))  # a tells b at once, whose answer tells a: a is busy, so it waits
    assert b.at_once == [SendBack(a)] and a.at_once == [SendTo(b)]
    assert a.handled == [] and a.max_depth == 1 and a.mailbox_size == 1
    assert await a.ask(Quick(6)) == ("ok", Quick(6))  # behind the note, through receive
    assert a.handled == [Note(2), Quick(6)] and a.max_busy == 1


async def test_a_stop_begun_while_answering_at_once_ends_after_it() -> None:
    system, _ = make_system()
    actor = system.spawn(Teller())
    await settle()
    actor.tell(StopSelf())
    assert actor.at_once == [StopSelf()] and not actor.alive
    with pytest.raises(ActorStopped):
        actor.tell(Note(7))
    await settle()
    assert actor.events[-1] == "stop" and system.get("teller") is None


async def test_a_job_actor_without_answers_at_once_is_told_through_its_mailbox() -> None:
    system, _ = make_system()
    actor = system.spawn(Recorder())
    await settle()
    assert not Recorder._answers_at_once and Eager._answers_at_once
    actor.tell(Note(8))
    assert actor.mailbox_size == 1 and actor._task is not None
    await settle()
    assert actor.handled == [Note(8)]


@pytest.mark.parametrize("message", [{"kind": "note"}, "note", Note, Mutable()])
async def test_a_bad_message_told_to_an_idle_actor_answering_at_once_is_still_a_bug(
    message: object,
) -> None:
    system, _ = make_system()
    actor = system.spawn(Eager())
    await settle()  # idle: a tell would be offered to answer_at_once
    with pytest.raises(TypeError):
        actor.tell(message)
    with pytest.raises(TypeError):
        actor.try_tell(message)
    with pytest.raises(TypeError):
        await actor.ask(message)
    assert actor.at_once == [] and actor._task is None and actor._mailbox is None
