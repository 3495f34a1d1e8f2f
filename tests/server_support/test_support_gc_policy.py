"""The orchestrator's garbage-collector policy: long-lived objects are frozen, so a full
collection never walks the whole fleet, and frozen cyclic garbage is still reclaimed by
the periodic full collection. The policy leaves the collector as it found it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections.abc import AsyncIterator, Iterator

import pytest

from tunefleet.http.gc_policy import GEN0_THRESHOLD, run_gc_policy


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@contextlib.asynccontextmanager
async def policy(freeze_every_s: float, full_every_s: float) -> AsyncIterator[None]:
    task = asyncio.create_task(run_gc_policy(freeze_every_s, full_every_s))
    try:
        await asyncio.sleep(0)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _frozen_cycle() -> weakref.ref[Node]:
    """A cycle that lives through a freeze (the policy's own step, taken here so the test
    does not wait on a cadence whose pauses grow with the test process's heap), then
    becomes garbage."""
    node = Node()
    ref = weakref.ref(node)
    gc.freeze()
    del node
    return ref


@pytest.fixture(autouse=True)
def collector_left_alone() -> Iterator[None]:
    assert gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


async def test_long_lived_objects_are_frozen_and_thawed_when_it_stops() -> None:
    async with policy(freeze_every_s=0.02, full_every_s=3600):
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


async def test_frozen_garbage_outlives_collections_until_the_full_one() -> None:
    async with policy(freeze_every_s=0.02, full_every_s=3600):
        ref = await _frozen_cycle()
        gc.collect()  # walks every generation, but not the frozen objects
        assert ref() is not None


async def test_the_periodic_full_collection_reclaims_frozen_garbage() -> None:
    async with policy(freeze_every_s=0.02, full_every_s=0.1):
        ref = await _frozen_cycle()
        # By time, not by count: late in a full test run each full collection walks a
        # heap of thousands of tests' objects and takes most of a second.
        deadline = asyncio.get_running_loop().time() + 60
        for _ in range(3000):
            if ref() is None or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.02)
        assert ref() is None
        assert gc.get_freeze_count() > 0  # and everything alive frozen again


async def test_young_collections_wait_longer_while_it_runs_and_as_before_after() -> None:
    gc.set_threshold(700, 11, 12)  # whatever they were, the older ones are kept
    async with policy(freeze_every_s=3600, full_every_s=3600):
        assert gc.get_threshold() == (GEN0_THRESHOLD, 11, 12)
    assert gc.get_threshold() == (700, 11, 12)
