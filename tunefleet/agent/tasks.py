"""Helpers for the agent's supervised tasks: which one failed, and cancelling one."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


def first_error(done: set[asyncio.Task[Any]]) -> BaseException | None:
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            return task.exception()
    return None


async def cancel_task(task: asyncio.Task[Any]) -> None:
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
