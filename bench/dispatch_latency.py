"""Dispatch latency: from the start of ``POST /api/queue/submit`` to the ``job_submit``
event arriving on a worker's stream, with 1, 500 and 5,000 idle connected workers.

One job at a time: submit, wait for the event, the worker acknowledges and completes
it, a short pause, again; so every sample starts with all workers idle. The fleet grows
between sizes on one orchestrator, and every worker heartbeats at the seed's 30-second
cadence meanwhile, as a real idle fleet would.
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
    summary,
)
from bench.plots import cdf, scaling

SIZES: tuple[int, ...] = pick((1, 500, 5000), (1, 100))
SAMPLES: int = pick(200, 30)
TARGET_SIZE = 500
TARGETS = {"p50": "<= 2 ms @500", "p99": "<= 5 ms @500"}


def run() -> list[Row]:
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for backend in backends():
        rows += _run_backend(backend, raw)
    save_raw("dispatch_latency", raw)
    _plot(raw)
    return rows


def _run_backend(backend: str, raw: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    with session(backend, "dispatch") as s:
        s.call("set_mode", on_job="complete")
        for size in SIZES:
            s.fleet(size)
            s.call("background_heartbeats", interval_s=30.0)
            time.sleep(0.5)  # let registrations and the first heartbeats settle
            reply = s.call("dispatch", samples=SAMPLES)
            result = reply["result"]
            latencies = result["latencies_ms"]
            raw[f"{backend}@{size}"] = {
                "latencies_ms": latencies,
                "submit_ms": result["submit_ms"],
                "cpu": {k: v for k, v in reply.items() if k != "result"},
            }
            targets = TARGETS if size == TARGET_SIZE else {}
            note = f"{SAMPLES} samples; {cpu_note(reply)}; {machine_note()}"
            rows += latency_rows(f"{backend} dispatch @{size}", latencies, targets, note)
            submit = summary(result["submit_ms"])
            rows.append(
                row(
                    f"{backend} submit response @{size} p50",
                    round(submit["p50"], 3),
                    "ms",
                    None,
                    "the submit request's own round trip, for comparison",
                )
            )
        s.call("background_heartbeats", interval_s=0)
        s.call("close_streams")
    return rows


def _plot(raw: dict[str, Any]) -> None:
    cdf(
        "dispatch_latency-cdf",
        "Dispatch latency: submit → job_submit at the worker",
        {key: value["latencies_ms"] for key, value in raw.items()},
    )
    series: dict[str, list[tuple[float, float]]] = {}
    for key, value in raw.items():
        backend, size = key.split("@")
        stats = summary(value["latencies_ms"])
        for q in ("p50", "p99"):
            series.setdefault(f"{backend} {q}", []).append((float(size), stats[q]))
    scaling(
        "dispatch_latency-scaling",
        "Dispatch latency vs idle connected workers",
        series,
        "idle connected workers",
        "ms",
        log_x=True,
    )
