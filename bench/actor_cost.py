"""What an actor costs: memory when idle, tell throughput, ask latency, shutdown.

Every worker and every live job is an actor, so an idle one must be nearly free and
a message must cost microseconds. Run alone with `python -m bench actor_cost`.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import Row, row
from tunefleet.actors.clock import RealClock
from tunefleet.actors.runtime import Actor, ActorStopped, ActorSystem

IDLE_ACTORS = 10_000
ONE_ACTOR_MESSAGES = 200_000
SPREAD_ACTORS, SPREAD_MESSAGES_EACH = 1_000, 100
ONE_BY_ONE_MESSAGES = 50_000
ASKS = 20_000
STOP_ACTORS, STOP_QUEUED_EACH = 1_000, 100


@dataclass(frozen=True, slots=True)
class Ping:
    seq: int = 0


class IdleActor(Actor):
    """The runtime's own cost: a subclass that adds nothing."""

    __slots__ = ()

    async def receive(self, message: object) -> object:
        return None


class PlainActor(Actor):
    """A typical subclass: no __slots__ of its own, so a __dict__ with three attributes."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.state = "idle"
        self.current_job_id: str | None = None
        self.drain_requested = False

    async def receive(self, message: object) -> object:
        return None


class CountingActor(Actor):
    """Counts into a shared tally and wakes the benchmark when all have arrived."""

    __slots__ = ("tally",)

    def __init__(self, name: str, tally: Tally) -> None:
        super().__init__(name)
        self.tally = tally

    async def receive(self, message: object) -> object:
        tally = self.tally
        tally.count += 1
        if tally.count == tally.expected:
            tally.done.set()
        return None


class Tally:
    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.done = asyncio.Event()


def _worker_name(i: int) -> str:
    return f"worker:w_{i:012x}"  # the shape of real names, so the strings cost the same


# --- memory ----------------------------------------------------------------------------


async def _traced_bytes_per_actor(
    make: Callable[[str], Actor], *, messaged: bool, count: int = IDLE_ACTORS
) -> float:
    system = ActorSystem(RealClock())
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        actors = [system.spawn(make(_worker_name(i))) for i in range(count)]
        if messaged:
            for actor in actors:
                await actor.ask(Ping())
            await asyncio.sleep(0)  # let the last drain task end
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    await system.stop_all(drain=False)
    return used / count


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def _rss_probe_main() -> dict[str, float]:
    system = ActorSystem(RealClock())
    gc.collect()
    before = _rss_bytes()
    actors = [system.spawn(IdleActor(_worker_name(i))) for i in range(IDLE_ACTORS)]
    gc.collect()
    after = _rss_bytes()
    await system.stop_all(drain=False)
    return {"bytes_per_actor": (after - before) / len(actors)}


def rss_probe() -> None:
    """Entry point of the child process: a fresh interpreter has no freed arenas to reuse."""
    print(json.dumps(asyncio.run(_rss_probe_main())))


def _rss_bytes_per_actor() -> float | None:
    if not Path("/proc/self/statm").exists():
        return None
    child = subprocess.run(
        [sys.executable, "-c", "from bench.actor_cost import rss_probe; rss_probe()"],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    last_line = child.stdout.strip().splitlines()[-1]  # log lines may come before it
    return float(json.loads(last_line)["bytes_per_actor"])


# --- throughput ------------------------------------------------------------------------


async def _burst_one_actor() -> tuple[float, float]:
    """Tell N messages in a row to one actor; return (tell µs each, msgs/s end to end)."""
    system = ActorSystem(RealClock())
    tally = Tally(ONE_ACTOR_MESSAGES)
    actor = system.spawn(CountingActor("counter", tally))
    message = Ping()
    gc.collect()
    start = time.perf_counter()
    for _ in range(ONE_ACTOR_MESSAGES):
        actor.tell(message)
    told = time.perf_counter()
    await tally.done.wait()
    elapsed = time.perf_counter() - start
    await system.stop_all()
    return (told - start) / ONE_ACTOR_MESSAGES * 1e6, ONE_ACTOR_MESSAGES / elapsed


async def _one_by_one() -> float:
    """Tell one message and let it be handled before the next: a task per message."""
    system = ActorSystem(RealClock())
    tally = Tally(ONE_BY_ONE_MESSAGES)
    actor = system.spawn(CountingActor("counter", tally))
    gc.collect()
    start = time.perf_counter()
    for i in range(ONE_BY_ONE_MESSAGES):
        actor.tell(Ping(i))
        await asyncio.sleep(0)
    await tally.done.wait()
    elapsed = time.perf_counter() - start
    await system.stop_all()
    return ONE_BY_ONE_MESSAGES / elapsed


async def _spread() -> float:
    """Round-robin tells across many actors; msgs/s until all are handled."""
    system = ActorSystem(RealClock())
    total = SPREAD_ACTORS * SPREAD_MESSAGES_EACH
    tally = Tally(total)
    actors = [system.spawn(CountingActor(_worker_name(i), tally)) for i in range(SPREAD_ACTORS)]
    gc.collect()
    start = time.perf_counter()
    for i in range(SPREAD_MESSAGES_EACH):
        message = Ping(i)
        for actor in actors:
            actor.tell(message)
    await tally.done.wait()
    elapsed = time.perf_counter() - start
    await system.stop_all()
    return total / elapsed


async def _ask_latencies_us() -> list[float]:
    system = ActorSystem(RealClock())
    actor = system.spawn(IdleActor("echo"))
    clock_ns = time.perf_counter_ns
    latencies = []
    gc.collect()
    for i in range(ASKS):
        start = clock_ns()
        await actor.ask(Ping(i))
        latencies.append((clock_ns() - start) / 1000)
    await system.stop_all()
    return sorted(latencies)


def _percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def _stop_all_ms(drain: bool) -> float:
    system = ActorSystem(RealClock())
    actors = [system.spawn(IdleActor(_worker_name(i))) for i in range(STOP_ACTORS)]
    asks = []
    for actor in actors:
        for i in range(STOP_QUEUED_EACH - 1):
            actor.tell(Ping(i))
        asks.append(asyncio.ensure_future(actor.ask(Ping())))  # one waiting caller each
    await asyncio.sleep(0)  # asks queued; the actors have not run yet: mailboxes are full
    gc.collect()
    start = time.perf_counter()
    await system.stop_all(drain=drain)
    elapsed = time.perf_counter() - start
    results = await asyncio.gather(*asks, return_exceptions=True)
    rejected = sum(isinstance(result, ActorStopped) for result in results)
    if rejected != (0 if drain else len(asks)):
        raise RuntimeError(f"stop_all(drain={drain}) answered {rejected} asks with ActorStopped")
    return elapsed * 1000


async def _measure() -> list[Row]:
    slotted = await _traced_bytes_per_actor(IdleActor, messaged=False)
    after_message = await _traced_bytes_per_actor(IdleActor, messaged=True)
    plain = await _traced_bytes_per_actor(PlainActor, messaged=False)
    tell_us, burst_rate = await _burst_one_actor()
    one_by_one_rate = await _one_by_one()
    spread_rate = await _spread()
    latencies = await _ask_latencies_us()
    stop_fast = await _stop_all_ms(drain=False)
    stop_drain = await _stop_all_ms(drain=True)
    idle = f"{IDLE_ACTORS:,} idle actors"
    return [
        row("idle_actor_bytes", round(slotted), "B", "< 512 B", f"tracemalloc, {idle}, spawned"),
        row(
            "idle_actor_bytes_after_a_message",
            round(after_message),
            "B",
            "< 512 B",
            "tracemalloc; mailbox and task are given back when idle",
        ),
        row(
            "idle_plain_subclass_bytes",
            round(plain),
            "B",
            None,
            "tracemalloc; a subclass without __slots__ holding 3 attributes",
        ),
        row("tell_cost", round(tell_us, 3), "us", "< 2 us", "enqueue only, burst to one actor"),
        row(
            "throughput_one_actor_burst",
            round(burst_rate),
            "msg/s",
            "> 100,000 msg/s",
            f"{ONE_ACTOR_MESSAGES:,} tells then handled by one actor",
        ),
        row(
            "throughput_one_actor_one_by_one",
            round(one_by_one_rate),
            "msg/s",
            "> 20,000 msg/s",
            "tell, yield, handle: a fresh task per message (worst case)",
        ),
        row(
            "throughput_1000_actors",
            round(spread_rate),
            "msg/s",
            "> 50,000 msg/s",
            f"{SPREAD_MESSAGES_EACH} tells each, round-robin over {SPREAD_ACTORS:,} actors",
        ),
        row("ask_p50", round(_percentile(latencies, 0.50), 1), "us", "< 50 us", f"{ASKS:,} asks"),
        row("ask_p99", round(_percentile(latencies, 0.99), 1), "us", "< 200 us", "idle actor"),
        row(
            "stop_all_reject_ms",
            round(stop_fast, 1),
            "ms",
            "< 100 ms",
            f"drain=False, {STOP_ACTORS:,} actors x {STOP_QUEUED_EACH} queued",
        ),
        row(
            "stop_all_drain_ms",
            round(stop_drain, 1),
            "ms",
            None,
            f"drain=True: handles all {STOP_ACTORS * STOP_QUEUED_EACH:,} queued messages",
        ),
    ]


def run() -> list[Row]:
    rows = asyncio.run(_measure())
    rss = _rss_bytes_per_actor()
    if rss is not None:
        rows.insert(
            1,
            row(
                "idle_actor_rss_bytes", round(rss), "B", "< 1,024 B", f"RSS delta, {IDLE_ACTORS:,}"
            ),
        )
    return rows


if __name__ == "__main__":
    for result in run():
        print(result)
