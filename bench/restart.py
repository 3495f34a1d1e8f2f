"""Restart: how long until 1,000 workers are reconnected and reconciled after the
orchestrator is killed (SIGKILL) and started again.

A tenth of the workers hold a running job. When their streams drop, every simulated
worker retries every 50-150 ms (not the agent's 1 s backoff, so the orchestrator's own
recovery is what is timed): register again, naming the job it holds, then reopen its
stream with ``Last-Event-ID``. Reconciled means each job holder was told to resume its
job (``resume_job`` in the register answer).
"""

from __future__ import annotations

import time
from typing import Any

from bench import Row, row
from bench.fleet_common import (
    backends,
    cpu_note,
    latency_rows,
    machine_note,
    pick,
    save_raw,
    session,
)
from bench.plots import cdf

WORKERS: int = pick(1000, 200)
HOLDING = WORKERS // 10


def run() -> list[Row]:
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for backend in backends():
        rows += _run_backend(backend, raw)
    save_raw("restart", raw)
    cdf(
        "restart-cdf",
        f"Restart: when each of {WORKERS} workers was back (s after ready)",
        {key: value["after_ready_ms"] for key, value in raw.items()},
        xlabel="ms after the new orchestrator was ready",
        log_x=False,
    )
    return rows


def _run_backend(backend: str, raw: dict[str, Any]) -> list[Row]:
    with session(backend, "restart") as s:
        s.fleet(WORKERS)
        s.call("set_mode", on_job="ack")
        s.call("hold_jobs", count=HOLDING)
        s.call("set_mode", on_job="ack", reconnect=True)
        killed_at = time.time()
        s.server.kill()
        s.server.start(timeout_s=120)
        s.call("set_server_pid", pid=s.server.pid)
        reply = s.call("await_reconnected", timeout_s=180)
        s.call("close_streams")
        started_at, ready_at = s.server.started_at, s.server.ready_at
    result = reply["result"]
    back = result["reconnected_at"]
    after_ready = [(t - ready_at) * 1000 for t in back]
    raw[backend] = {
        "after_ready_ms": after_ready,
        "result": result,
        "killed_at": killed_at,
        "started_at": started_at,
        "ready_at": ready_at,
    }
    last = max(back) if back else float("nan")
    prefix = f"{backend} {WORKERS} workers"
    note = f"{HOLDING} holding jobs; {cpu_note(reply)} while reconnecting; {machine_note()}"
    return [
        row(f"{prefix} reconnected", result["reconnected"], "workers", f"= {WORKERS}", note),
        row(
            f"{prefix} jobs resumed",
            result["resumed"],
            "jobs",
            f"= {HOLDING}",
            "resume_job in the register answer",
        ),
        row(
            f"{prefix} start → ready",
            round(ready_at - started_at, 2),
            "s",
            None,
            "new process: imports, storage, fleet rebuilt from storage",
        ),
        row(
            f"{prefix} ready → all reconciled",
            round(last - ready_at, 2),
            "s",
            None,
            "includes up to 150 ms of simulated retry delay",
        ),
        row(f"{prefix} kill → all reconciled", round(last - killed_at, 2), "s", None, ""),
        *latency_rows(f"{prefix} back after ready", after_ready, {}, "", ("p50", "p99")),
    ]
