"""Takeover: two orchestrators on PostgreSQL, 1,000 workers; the active one is killed
(SIGKILL). How long until the standby serves (its /readyz says ready), and until every
worker has registered with it and reopened its stream, the job holders told to resume
their jobs (reconciled).

A tenth of the workers hold a running job. When the active process dies, the load
generator aims at the standby at once (an agent given both URLs moves on a lost
connection) and every simulated worker retries every 50-150 ms, so the standby's 503s
are counted and the orchestrators' own recovery is what is timed, as in `restart`.
The lease is the default 5 s, so most of "kill → serving" is waiting the lease out.
"""

from __future__ import annotations

import time
from typing import Any

from bench import Row, row
from bench.fleet_common import cpu_note, latency_rows, machine_note, pick, save_raw, session
from bench.orchestrator_proc import Orchestrator, postgres_available
from tunefleet.storage.leadership import DEFAULT_LEASE_S

WORKERS: int = pick(1000, 200)
HOLDING = WORKERS // 10


def run() -> list[Row]:
    if not postgres_available():
        return [
            row(
                "takeover (PostgreSQL only)",
                float("nan"),
                "s",
                None,
                "skipped: no PostgreSQL on 127.0.0.1:5432",
            )
        ]
    raw: dict[str, Any] = {}
    rows = _run(raw)
    save_raw("takeover", raw)
    return rows


def _run(raw: dict[str, Any]) -> list[Row]:
    with session("postgresql", "takeover") as s:
        standby = Orchestrator(
            s.work_dir / "standby",
            s.server.database_url,
            heartbeat_timeout_s=s.server.heartbeat_timeout_s,
        )
        standby.start(timeout_s=120, standby=True)
        try:
            s.fleet(WORKERS)
            s.call("set_mode", on_job="ack")
            s.call("hold_jobs", count=HOLDING)
            s.call("set_mode", on_job="ack", reconnect=True)
            killed_at = time.time()
            s.server.kill()
            s.call("set_port", port=standby.port)
            s.call("set_server_pid", pid=standby.pid)
            serving_at = _wait_serving(standby, timeout_s=120)
            reply = s.call("await_reconnected", timeout_s=180)
            status = s.call("status")["result"]
            s.call("close_streams")
        finally:
            standby.stop()
    result = reply["result"]
    back = result["reconnected_at"]
    last = max(back) if back else float("nan")
    after_serving = [(t - serving_at) * 1000 for t in back]
    raw["postgresql"] = {
        "after_serving_ms": after_serving,
        "result": result,
        "killed_at": killed_at,
        "serving_at": serving_at,
        "errors": status.get("errors"),
    }
    prefix = f"postgresql {WORKERS} workers"
    refused = sum(v for k, v in (status.get("errors") or {}).items() if "503" in k)
    note = (
        f"{HOLDING} holding jobs; lease {DEFAULT_LEASE_S:g} s; {cpu_note(reply)} while "
        f"reconnecting; {machine_note()}"
    )
    return [
        row(f"{prefix} reconnected", result["reconnected"], "workers", f"= {WORKERS}", note),
        row(f"{prefix} jobs resumed", result["resumed"], "jobs", f"= {HOLDING}", ""),
        row(
            f"{prefix} kill → standby serving",
            round(serving_at - killed_at, 2),
            "s",
            "< 10",
            "the lease running out, the claim, the fleet rebuilt from storage",
        ),
        row(
            f"{prefix} kill → all reconciled",
            round(last - killed_at, 2),
            "s",
            "< 10",
            f"the issue's takeover time; {refused} requests answered 503 by the standby",
        ),
        *latency_rows(f"{prefix} back after serving", after_serving, {}, "", ("p50", "p99")),
    ]


def _wait_serving(standby: Orchestrator, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if standby._ready():
            return time.time()
        time.sleep(0.02)
    raise RuntimeError(f"the standby never took over: {standby.log_tail()}")
