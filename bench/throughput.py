"""Throughput: full job cycles per second (submit, dispatch, acknowledge, complete) with
50 workers and 50 concurrent submitters.

Closed loop: each submitter submits a job and waits until a worker has reported it
completed, then submits the next; a simulated worker acknowledges (``running``) and
completes a job the moment it arrives. Cycles are counted after a short warm-up.
"""

from __future__ import annotations

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

WORKERS = 50
SUBMITTERS = 50
DURATION_S: float = pick(10.0, 3.0)
# Issue 14's targets (with 50 workers and 50 submitters).
TARGET = ">= 800 cycles/s"


def run() -> list[Row]:
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for backend in backends():
        with session(backend, "throughput") as s:
            s.fleet(WORKERS)
            s.call("set_mode", on_job="complete")
            reply = s.call("throughput", submitters=SUBMITTERS, duration_s=DURATION_S)
            s.call("close_streams")
        result = reply["result"]
        raw[backend] = {
            "cycle_ms": result["cycle_ms"],
            "cpu": {k: v for k, v in reply.items() if k != "result"},
        }
        note = f"{WORKERS} workers, {SUBMITTERS} submitters; {cpu_note(reply)}; {machine_note()}"
        cpu_per_cycle = reply.get("server_cpu_s", 0.0) / max(1, result["total_cycles"]) * 1000
        rows += [
            row(f"{backend} cycles/s", round(result["rate"], 1), "cycles/s", TARGET, note),
            row(
                f"{backend} server CPU per cycle",
                round(cpu_per_cycle, 2),
                "ms",
                "<= 1.2 ms",
                "all server threads, over every cycle of the run",
            ),
            row(
                f"{backend} ceiling at one core",
                round(1000 / max(cpu_per_cycle, 1e-9), 1),
                "cycles/s",
                TARGET,
                "1 s / CPU per cycle: the rate with a core to itself (the GIL allows one)",
            ),
            *latency_rows(f"{backend} cycle", result["cycle_ms"], {}, "submit → completed"),
        ]
    save_raw("throughput", raw)
    cdf(
        "throughput-cdf",
        "Job cycle time (submit → completed) under 50 submitters",
        {key: value["cycle_ms"] for key, value in raw.items()},
    )
    return rows
