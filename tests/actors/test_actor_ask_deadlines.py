"""Ask timeouts on one timer per timeout: each ask still fails at its own deadline,
answered asks are dropped, and nothing is held once the asks are over."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from tunefleet.actors.ask_deadlines import AskDeadlines
from tunefleet.actors.clock import FakeClock
from tunefleet.actors.runtime import Actor, ActorSystem, AskTimeout


@dataclass(frozen=True)
class Hold:
    """receive waits until the test opens the gate."""


@dataclass(frozen=True)
class Echo:
    value: int


class Gated(Actor):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.gate = asyncio.Event()

    async def receive(self, message: object) -> object:
        if isinstance(message, Hold):
            await self.gate.wait()
        return message


def _system() -> ActorSystem:
    return ActorSystem(FakeClock())


async def test_many_answered_asks_leave_almost_nothing_held() -> None:
    system = _system()
    actor = system.spawn(Gated("echo"))
    for value in range(500):
        assert await actor.ask(Echo(value)) == Echo(value)
    # Each ask drops the answered ones before it; only the last is still held.
    assert system.ask_deadlines.watched == 1


async def test_a_waiting_ask_expires_while_later_ones_with_its_timeout_are_answered() -> None:
    system = _system()
    stuck, quick = system.spawn(Gated("stuck")), system.spawn(Gated("quick"))
    waiting = asyncio.ensure_future(stuck.ask(Hold(), timeout_s=0.05))
    answered = [await quick.ask(Echo(n), timeout_s=0.05) for n in range(20)]
    assert answered == [Echo(n) for n in range(20)]
    with pytest.raises(AskTimeout) as caught:
        await waiting
    assert (caught.value.actor, caught.value.message_type) == ("stuck", "Hold")
    stuck.gate.set()
    await asyncio.sleep(0.06)  # past the answered asks' deadlines: the timer ran out
    assert system.ask_deadlines.watched == 0


async def test_asks_with_different_timeouts_fail_in_deadline_order() -> None:
    system = _system()
    actor = system.spawn(Gated("slow"))
    failed: list[float] = []

    async def ask(timeout_s: float) -> None:
        with pytest.raises(AskTimeout):
            await actor.ask(Hold(), timeout_s=timeout_s)
        failed.append(timeout_s)

    await asyncio.gather(ask(0.2), ask(0.01), ask(0.1))
    assert failed == [0.01, 0.1, 0.2]
    actor.gate.set()


async def test_each_ask_in_a_queue_fails_at_its_own_deadline() -> None:
    system = _system()
    actor = system.spawn(Gated("slow"))
    first = asyncio.ensure_future(actor.ask(Hold(), timeout_s=0.03))
    await asyncio.sleep(0.02)
    second = asyncio.ensure_future(actor.ask(Echo(1), timeout_s=0.03))
    with pytest.raises(AskTimeout):
        await first
    # The second one was made later: it is still waiting when the first fails.
    assert not second.done()
    with pytest.raises(AskTimeout):
        await second
    actor.gate.set()


async def test_a_cancelled_asker_is_dropped_without_a_timeout() -> None:
    system = _system()
    actor = system.spawn(Gated("slow"))
    asking = asyncio.ensure_future(actor.ask(Hold(), timeout_s=0.02))
    await asyncio.sleep(0)
    asking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asking
    await asyncio.sleep(0.03)
    assert system.ask_deadlines.watched == 0
    actor.gate.set()


def test_a_new_loop_starts_with_nothing_from_the_old_one() -> None:
    deadlines = AskDeadlines()

    async def leave_one_waiting() -> None:
        loop = asyncio.get_running_loop()
        deadlines.watch(loop, loop.create_future(), "a", Echo(1), 60.0)

    asyncio.run(leave_one_waiting())
    assert deadlines.watched == 1

    async def ask_on_a_new_loop() -> None:
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[object] = loop.create_future()
        deadlines.watch(loop, reply, "a", Echo(2), 0.01)
        assert deadlines.watched == 1
        with pytest.raises(AskTimeout):
            await reply

    asyncio.run(ask_on_a_new_loop())
