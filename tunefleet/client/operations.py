"""The API's operations over a ``Transport``: what the command line and ``Client`` share.

Each is one coroutine over plain values, so ``tunefleet jobs ...`` and a notebook's
``Client`` read logs, page through metrics, wait for a job and check a download's
checksum the same way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

from tunefleet.client.backoff import next_sleep
from tunefleet.client.errors import (
    ChecksumMismatch,
    NotFound,
    StreamFailed,
    Unreachable,
    WaitTimeout,
)
from tunefleet.client.transport import Transport, event_data
from tunefleet.client.types import Artifact, Artifacts, Downloaded, Job, LogLine, MetricPoint

TERMINAL = frozenset({"completed", "failed", "cancelled"})
LOG_PAGE = 5000  # the API's largest page
LOG_MAX_PAGES = 10_000  # 50 million lines: a bound, not a limit anyone should meet
METRICS_PAGE = 10_000
METRICS_MAX_PAGES = 1000  # a bound: the history itself is bounded per attempt
STREAM_READ_S = 45.0  # the server pings every 15 s
RECONNECT_WINDOW_S = 30.0  # ride out an orchestrator restart or failover this long


def job_path(job_id: str, tail: str = "") -> str:
    return f"/api/queue/{quote(job_id, safe='')}{tail}"


async def read_logs(
    api: Transport, job_id: str, attempt: int | None = None, stream: str | None = None
) -> list[LogLine]:
    """Every stored line, page by page (``next_seq`` says where the next page starts)."""
    lines: list[LogLine] = []
    from_seq = 0
    for _ in range(LOG_MAX_PAGES):
        params = {"from_seq": from_seq, "limit": LOG_PAGE, "attempt": attempt, "stream": stream}
        page = await api.get(job_path(job_id, "/logs"), params)
        lines.extend(page["lines"])
        if page["next_seq"] <= from_seq:
            break
        from_seq = page["next_seq"]
    return lines


async def follow_logs(
    api: Transport,
    job_id: str,
    *,
    from_seq: int = 0,
    reconnect_window_s: float = RECONNECT_WINDOW_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> AsyncGenerator[LogLine, None]:
    """Every line from ``from_seq``, then new ones as they come, until the job ends. A
    stream that breaks (an orchestrator restart, a failover) is opened again from the
    line after the last one seen, for up to ``reconnect_window_s`` of failing."""
    failing_since: float | None = None
    while True:
        try:
            async with api.stream(
                job_path(job_id, "/logs"),
                {"follow": "true", "from_seq": from_seq},
                read_timeout_s=STREAM_READ_S,
            ) as events:
                failing_since = None
                async for event in events:
                    if event.event == "log":
                        line = cast(LogLine, event_data(event))
                        if isinstance(line.get("seq"), int):
                            from_seq = line["seq"] + 1
                        yield line
                    elif event.event == "end":
                        return
            raise StreamFailed(f"the log stream of {job_id} ended before the job did")
        except (StreamFailed, Unreachable):
            now = clock()
            failing_since = failing_since if failing_since is not None else now
            if now - failing_since > reconnect_window_s:
                raise
            await (sleep or asyncio.sleep)(1.0)


async def read_metrics(
    api: Transport, job_id: str, attempt: int | None = None
) -> list[MetricPoint]:
    """Every stored point, page by page (``next_since`` says where the next starts)."""
    points: list[MetricPoint] = []
    since = 0
    for _ in range(METRICS_MAX_PAGES):
        params = {"since": since, "limit": METRICS_PAGE, "attempt": attempt}
        page = await api.get(job_path(job_id, "/metrics"), params)
        points.extend(page["points"])
        if page["next_since"] <= since or len(page["points"]) < METRICS_PAGE:
            break
        since = page["next_since"]
    return points


async def polls(
    api: Transport,
    job_id: str,
    *,
    timeout_s: float | None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] | None = None,
    **policy: float,
) -> AsyncGenerator[Job, None]:
    """Each answer of ``GET /api/queue/{id}``, polled with backoff, until the job ends
    (the last one yielded is terminal). An unreachable orchestrator (a restart, a
    failover) is waited out within the timeout. Raises ``WaitTimeout`` when
    ``timeout_s`` passes first."""
    pause = sleep or asyncio.sleep
    deadline = None if timeout_s is None else clock() + timeout_s
    status = "unknown"
    count = 0
    while True:
        try:
            job = cast(Job, await api.get(job_path(job_id)))
        except Unreachable:
            if deadline is not None and clock() >= deadline:
                raise
        else:
            status = job["status"]
            yield job
            if status in TERMINAL:
                return
        remaining = None if deadline is None else deadline - clock()
        if remaining is not None and remaining <= 0:
            raise WaitTimeout(job_id, status, float(timeout_s or 0))
        await pause(next_sleep(count, remaining, **policy))
        count += 1


async def wait(
    api: Transport,
    job_id: str,
    *,
    timeout_s: float | None,
    on_poll: Callable[[Job], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] | None = None,
    **policy: float,
) -> Job:
    """``polls`` to the end: the job's final detail; ``on_poll`` sees each answer."""
    last: Job | None = None
    async for job in polls(api, job_id, timeout_s=timeout_s, clock=clock, sleep=sleep, **policy):
        last = job
        if on_poll is not None:
            on_poll(job)
    assert last is not None  # polls returns only after yielding a terminal job
    return last


async def list_artifacts(api: Transport, job_id: str) -> Artifacts:
    return cast(Artifacts, await api.get(job_path(job_id, "/artifacts")))


def select_artifacts(job_id: str, listing: Artifacts, keys: Sequence[str] | None) -> list[Artifact]:
    """The listed artifacts named by ``keys`` (all when None); NotFound names a missing
    key, or says the job has none."""
    items = listing["artifacts"]
    if keys is not None:
        by_key = {item["key"]: item for item in items}
        missing = [key for key in keys if key not in by_key]
        if missing:
            detail = f"{job_id} has no artifact {missing[0]}; see `tunefleet jobs artifacts`"
            raise NotFound(404, detail, detail)
        items = [by_key[key] for key in keys]
    if not items:
        detail = f"{job_id} has no stored artifacts"
        raise NotFound(404, detail, detail)
    return items


async def download_artifact(
    api: Transport,
    job_id: str,
    item: Artifact,
    to_dir: Path,
    on_bytes: Callable[[int], None] | None = None,
    *,
    resume: bool = True,
) -> Downloaded:
    """One artifact into ``to_dir`` (its key's folders kept), its SHA-256 checked
    against the stored one; a mismatch deletes the file and raises ChecksumMismatch."""
    dest = to_dir.joinpath(*item["key"].split("/"))
    path = job_path(job_id, "/artifacts/" + quote(item["key"]))
    size, sha256 = await api.download(path, dest, on_bytes, resume=resume)
    if item["sha256"] and sha256 != item["sha256"]:
        dest.unlink(missing_ok=True)
        raise ChecksumMismatch(
            f"{item['key']} arrived with SHA-256 {sha256}, but it was stored with "
            f"{item['sha256']}; deleted it, download again"
        )
    return Downloaded(key=item["key"], path=dest, size=size, sha256=sha256)


def submit_body(source: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """A submit body: the config source's fields (``config_name``, or ``config`` with its
    ``name``), overridden by those set; None is "not set", never sent."""
    body = {**source, **{key: value for key, value in fields.items() if value is not None}}
    return {key: value for key, value in body.items() if value is not None}
