"""Shared helpers for the executor tests: an event recorder and small job scripts."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tunefleet.agent.executor import (
    ExecutorEvent,
    JobExecutor,
    JobSpec,
    JobStarted,
    LogBatch,
    LogLine,
    ProgressReported,
)


class Recorder:
    """An on_event callback that keeps every event and lets a test wait for one."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.events: list[ExecutorEvent] = []
        self.delay_s = delay_s
        self._changed = asyncio.Event()

    async def __call__(self, event: ExecutorEvent) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.events.append(event)
        self._changed.set()

    @property
    def log_lines(self) -> list[LogLine]:
        return [ln for ev in self.events if isinstance(ev, LogBatch) for ln in ev.lines]

    def texts(self, stream: str | None = None) -> list[str]:
        return [ln.line for ln in self.log_lines if stream is None or ln.stream == stream]

    @property
    def progress(self) -> list[dict[str, Any]]:
        return [ev.progress for ev in self.events if isinstance(ev, ProgressReported)]

    @property
    def started(self) -> list[JobStarted]:
        return [ev for ev in self.events if isinstance(ev, JobStarted)]

    async def wait_until(self, predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"condition not met within {timeout_s}s: {self.events!r}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                continue


def script(body: str) -> list[str]:
    """A job command running a small Python program with this interpreter."""
    return [sys.executable, "-c", textwrap.dedent(body)]


def spec(
    command: list[str] | str | None,
    *,
    job_id: str = "j_1",
    attempt: int = 1,
    config: dict[str, Any] | None = None,
    dataloader: object | None = None,
    env: dict[str, object] | None = None,
) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        attempt=attempt,
        config=config if config is not None else {"max_train_steps": 3},
        dataloader=dataloader,
        command=command,
        env=env or {},
    )


def executor(work_dir: Path, **options: Any) -> JobExecutor:
    """Fast settings for tests: short intervals, a short grace period."""
    options.setdefault("grace_s", 0.5)
    options.setdefault("log_interval_s", 0.05)
    options.setdefault("progress_poll_s", 0.05)
    return JobExecutor(work_dir, [sys.executable, "-c", "print('default command ran')"], **options)


def process_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def gone(pid: int, timeout_s: float = 5.0) -> bool:
    """Whether the process is gone within the timeout (SIGKILL is delivered asynchronously)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while process_alive(pid):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True
