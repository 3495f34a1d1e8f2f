"""The measuring commands of the load generator (bench/loadgen.py runs them).

Latencies are returned raw, in milliseconds, so the benchmark can take percentiles and
plot the distribution. Open-loop runs time each request from when it was *scheduled*,
not sent, so a backlog in either process shows up as latency instead of hiding.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from bench.loadgen_http import HttpConnection, HttpError, build_request

if TYPE_CHECKING:
    from bench.loadgen import Arrival, LoadGen, SimWorker

SCENARIOS = (
    "heartbeats",
    "background_heartbeats",
    "dispatch",
    "throughput",
    "failure",
    "hold_jobs",
    "await_reconnected",
    "departed",
    "probe",
)
_background: dict[str, asyncio.Task[None]] = {}


def _epoch(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


async def _open_loop(
    rate: float, duration_s: float, fire: Callable[[int, float], Awaitable[None]]
) -> dict[str, Any]:
    """Call ``fire(i, scheduled)`` ``rate`` times a second for ``duration_s``; wait for all.
    Returns how far behind schedule the sender itself fell (a loaded load generator)."""
    loop = asyncio.get_running_loop()
    total = max(1, int(rate * duration_s))
    t0 = loop.time()
    sent = 0
    max_lag = 0.0
    pending: set[asyncio.Task[None]] = set()
    while sent < total:
        now = loop.time()
        due = min(total, int((now - t0) * rate) + 1)
        while sent < due:
            scheduled = t0 + sent / rate
            max_lag = max(max_lag, now - scheduled)
            task = asyncio.ensure_future(fire(sent, scheduled))
            pending.add(task)
            task.add_done_callback(pending.discard)
            sent += 1
        await asyncio.sleep(max(0.0, min(0.005, t0 + sent / rate - loop.time())))
    if pending:
        await asyncio.wait(pending, timeout=60)
    return {"send_lag_max_ms": max_lag * 1000, "sent": sent, "seconds": loop.time() - t0}


async def heartbeats(
    gen: LoadGen,
    duration_s: float,
    rate: float | None = None,
    concurrency: int | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Heartbeats from the first ``workers`` registered workers (default all), round
    robin: open loop at ``rate`` per second, or closed loop with ``concurrency`` in flight."""
    fleet = [w for w in gen.workers if w.registered][:workers]
    if not fleet:
        raise ValueError("no registered workers to heartbeat")
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    loop = asyncio.get_running_loop()

    async def beat(worker: SimWorker, started: float) -> None:
        try:
            status = str(await gen.heartbeat(worker))
        except OSError as error:
            status = type(error).__name__
        latencies.append((loop.time() - started) * 1000)
        statuses[status] = statuses.get(status, 0) + 1

    result: dict[str, Any]
    if rate is not None:

        async def fire(i: int, scheduled: float) -> None:
            await beat(fleet[i % len(fleet)], scheduled)

        result = await _open_loop(rate, duration_s, fire)
    else:
        deadline = loop.time() + duration_s
        cursor = iter(range(10**9))

        async def lane() -> None:
            while loop.time() < deadline:
                await beat(fleet[next(cursor) % len(fleet)], loop.time())

        t0 = loop.time()
        await asyncio.gather(*(lane() for _ in range(concurrency or 16)))
        result = {"seconds": loop.time() - t0}
    result["statuses"] = statuses
    result["latencies_ms"] = latencies
    result["done"] = len(latencies)
    result["rate"] = len(latencies) / result["seconds"]
    return result


async def background_heartbeats(gen: LoadGen, interval_s: float) -> dict[str, Any]:
    """Every registered, not silenced worker heartbeats once per ``interval_s`` (spread
    evenly) until called again with 0."""
    old = _background.pop("heartbeats", None)
    if old is not None:
        old.cancel()
    if interval_s <= 0:
        return {}

    async def run() -> None:
        loop = asyncio.get_running_loop()
        while True:
            fleet = [w for w in gen.workers if w.registered]
            step = interval_s / max(1, len(fleet))
            t0 = loop.time()
            for i, worker in enumerate(fleet):
                if not worker.silent:
                    gen.spawn(gen.heartbeat(worker))
                delay = t0 + (i + 1) * step - loop.time()
                if delay > 0.002:
                    await asyncio.sleep(delay)
            await asyncio.sleep(max(0.0, t0 + interval_s - loop.time()))

    _background["heartbeats"] = asyncio.ensure_future(run())
    return {}


async def _arrival(gen: LoadGen, job_id: str, attempt: int, timeout_s: float) -> Arrival:
    key = f"{job_id}#{attempt}"
    try:
        return await asyncio.wait_for(asyncio.shield(gen.future("arrival", key)), timeout_s)
    finally:
        gen.forget("arrival", key)


async def dispatch(
    gen: LoadGen, samples: int, gap_s: float = 0.02, timeout_s: float = 10.0
) -> dict[str, Any]:
    """One job at a time: submit, time the job_submit's arrival at a worker, let the
    worker finish it (on_job must be "complete"), pause, again."""
    latencies, submit_rtt = [], []
    for _ in range(samples):
        started = time.perf_counter()
        job_id = await gen.submit()
        answered = time.perf_counter()
        arrival = await _arrival(gen, job_id, 1, timeout_s)
        latencies.append((arrival.perf - started) * 1000)
        submit_rtt.append((answered - started) * 1000)
        await asyncio.wait_for(gen.future("completed", job_id), timeout_s)
        gen.forget("completed", job_id)
        await asyncio.sleep(gap_s)
    return {"latencies_ms": latencies, "submit_ms": submit_rtt}


async def throughput(
    gen: LoadGen, submitters: int, duration_s: float, warmup_s: float = 1.0
) -> dict[str, Any]:
    """Closed loop: each submitter submits a job and waits until its worker has
    reported it completed; cycles counted after the warm-up (on_job "complete")."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    measure_from, deadline = start + warmup_s, start + warmup_s + duration_s
    cycles: list[float] = []
    failures = total = 0

    async def submitter() -> None:
        nonlocal failures, total
        while loop.time() < deadline:
            t0 = loop.time()
            job_id = await gen.submit()
            code = await asyncio.wait_for(gen.future("completed", job_id), 30)
            for kind, key in (("completed", job_id), ("acked", job_id), ("arrival", job_id + "#1")):
                gen.forget(kind, key)
            gen.arrivals.pop((job_id, 1), None)
            t1 = loop.time()
            total += 1
            if code != 200:
                failures += 1
            elif measure_from <= t1 <= deadline:
                cycles.append((t1 - t0) * 1000)

    await asyncio.gather(*(submitter() for _ in range(submitters)))
    return {
        "cycles": len(cycles),
        "rate": len(cycles) / duration_s,
        "cycle_ms": cycles,
        "failures": failures,
        "total_cycles": total,
        "seconds": loop.time() - start,
    }


async def failure(
    gen: LoadGen, samples: int, heartbeat_timeout_s: float, timeout_s: float = 30.0
) -> dict[str, Any]:
    """A worker takes a job, acknowledges it and then falls silent (its stream stays
    open, as a hung machine's would). Measured from the orchestrator's own timeline:
    last heartbeat → requeue, and requeue → the job_submit arriving at another worker.
    Needs on_job "ack" and background heartbeats for the others."""
    after_expiry, last_to_requeue, to_redispatch, stream_closed = [], [], [], []
    for _ in range(samples):
        job_id = await gen.submit()
        first = await _arrival(gen, job_id, 1, timeout_s)
        await asyncio.wait_for(gen.future("acked", job_id), timeout_s)
        victim = first.worker
        victim.silent = True
        second = await _arrival(gen, job_id, 2, heartbeat_timeout_s * 3 + timeout_s)
        record = await gen.admin_request("GET", f"/api/queue/{job_id}")
        requeued = [e for e in record["timeline"] if e["kind"] == "requeued"]
        worker = await gen.admin_request("GET", f"/api/admin/workers/{victim.worker_id}")
        last_beat = _epoch(worker["last_heartbeat"])
        requeue_at = _epoch(requeued[0]["at"])
        closed_at = gen.future("stream_closed", victim.worker_id)
        with_close = closed_at.done()
        after_expiry.append((requeue_at - last_beat - heartbeat_timeout_s) * 1000)
        last_to_requeue.append((requeue_at - last_beat) * 1000)
        to_redispatch.append((second.wall - requeue_at) * 1000)
        stream_closed.append(1.0 if with_close else 0.0)
    return {
        "after_expiry_ms": after_expiry,
        "last_heartbeat_to_requeue_ms": last_to_requeue,
        "requeue_to_redispatch_ms": to_redispatch,
        "victim_streams_closed": sum(stream_closed),
    }


async def hold_jobs(gen: LoadGen, count: int, timeout_s: float = 60.0) -> dict[str, Any]:
    """Submit ``count`` jobs and wait until workers have acknowledged them all (on_job
    must be "ack"); the workers keep them, running."""
    job_ids = [await gen.submit() for _ in range(count)]
    for job_id in job_ids:
        await asyncio.wait_for(gen.future("acked", job_id), timeout_s)
    return {"held": sum(w.job_id is not None for w in gen.workers)}


async def await_reconnected(gen: LoadGen, timeout_s: float = 120.0) -> dict[str, Any]:
    """Wait until every worker has registered again and reopened its stream."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if all(w.reconnected_at is not None for w in gen.workers):
            break
        await asyncio.sleep(0.05)
    times = [w.reconnected_at for w in gen.workers if w.reconnected_at is not None]
    return {
        "reconnected": len(times),
        "workers": len(gen.workers),
        "reconnected_at": times,
        "resumed": sum(w.resumed for w in gen.workers),
        "holding": sum(w.job_id is not None for w in gen.workers),
    }


async def departed(
    gen: LoadGen, departing: int, fresh: int, jobs: int, limit_s: float, concurrency: int = 16
) -> dict[str, Any]:
    """Workers that are gone: the ``departing`` workers present now (streams open, on_job
    "complete") each run a job; then their streams close at once, without a word, as
    dead machines' would; ``fresh`` new workers connect; ``jobs`` jobs are submitted.
    Counts the jobs the orchestrator sent to a departed worker (from each job's attempt
    history), and times each job from its submit to its completion. Bounded: whatever
    has not completed ``limit_s`` after the first submit is counted as unfinished."""
    loop = asyncio.get_running_loop()
    leaving = [w for w in gen.workers if w.stream is not None][:departing]
    warm = await gen.bounded(list(range(len(leaving))), concurrency, lambda _: gen.submit())
    await asyncio.wait_for(
        asyncio.gather(*(gen.future("completed", j) for j in warm)), timeout=limit_s
    )
    gone = {w.worker_id for w in leaving}
    for worker in leaving:
        if worker.stream is not None:
            worker.stream.close()

    before = len(gen.workers)
    await gen.cmd_create_workers(fresh)
    newcomers = gen.workers[before:]
    await gen.bounded(newcomers, 8, gen.register)
    await gen.bounded(newcomers, 32, gen.open_stream)

    submitted: dict[str, float] = {}
    completed: dict[str, float] = {}
    start = loop.time()

    async def submit(_: int) -> None:
        job_id = await gen.submit()
        submitted[job_id] = loop.time()
        fut = gen.future("completed", job_id)
        fut.add_done_callback(lambda _f, j=job_id: completed.setdefault(j, loop.time()))

    await gen.bounded(list(range(jobs)), concurrency, submit)
    waiting = [gen.future("completed", j) for j in submitted]
    await asyncio.wait(waiting, timeout=max(0.0, start + limit_s - loop.time()))
    finished_at = max(completed.values(), default=loop.time())

    async def went_to_departed(job_id: str) -> bool:
        record = await gen.admin_request("GET", f"/api/queue/{job_id}")
        return any(a.get("worker_id") in gone for a in record.get("attempt_history", []))

    sent_away = await gen.bounded(list(submitted), concurrency, went_to_departed)
    return {
        "jobs": len(submitted),
        "completed": len(completed),
        "unfinished": len(submitted) - len(completed),
        "sent_to_departed": sum(sent_away),
        "seconds": finished_at - start,
        "rate": len(completed) / max(1e-9, finished_at - start),
        "job_ms": [(completed[j] - submitted[j]) * 1000 for j in completed],
    }


async def probe(
    gen: LoadGen,
    duration_s: float,
    heartbeat_rate: float = 20.0,
    get_rate: float = 10.0,
    get_path: str = "/api/queue/stats",
    timeout_s: float = 5.0,
) -> dict[str, Any]:
    """A well-behaved client beside an attack: the first registered worker heartbeats
    at ``heartbeat_rate`` (open loop, on the keep-alive pool, as an agent does) while an
    admin API GET runs at ``get_rate``, each on a fresh connection (as the CLI or a page
    load does), so a server that stops accepting connections shows here. Each is timed
    from when it was scheduled; one not answered within ``timeout_s`` is a "timeout"
    and counts ``timeout_s`` of latency."""
    worker = next((w for w in gen.workers if w.registered), None)
    if worker is None:
        raise ValueError("no registered worker to probe with")
    loop = asyncio.get_running_loop()
    found: dict[str, dict[str, Any]] = {
        "heartbeat": {"latencies_ms": [], "statuses": {}},
        "get": {"latencies_ms": [], "statuses": {}},
    }

    async def timed(kind: str, scheduled: float, call: Callable[[], Awaitable[int]]) -> None:
        try:
            status = str(await asyncio.wait_for(call(), timeout_s))
        except TimeoutError:
            status = "timeout"
        except (HttpError, OSError) as error:
            status = type(error).__name__
        samples = found[kind]
        samples["latencies_ms"].append((loop.time() - scheduled) * 1000)
        samples["statuses"][status] = samples["statuses"].get(status, 0) + 1

    async def fresh_get() -> int:
        pool = gen.pool
        conn = await HttpConnection.open(pool.host, pool.port)
        try:
            raw = build_request("GET", get_path, pool.host_header, None, gen.admin)
            status, _ = await conn.request(raw)
        finally:
            conn.close()
        return status

    async def beat(_: int, scheduled: float) -> None:
        await timed("heartbeat", scheduled, lambda: gen.heartbeat(worker))

    async def get(_: int, scheduled: float) -> None:
        await timed("get", scheduled, fresh_get)

    await asyncio.gather(
        _open_loop(heartbeat_rate, duration_s, beat), _open_loop(get_rate, duration_s, get)
    )
    return found
