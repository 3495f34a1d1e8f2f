"""The yardstick: tunefleet beside the simplest correct server for the same protocol on
the same stack (bench/minimal_server.py), driven in one run by the same load generator
with the same scenarios, both on SQLite (the minimal server has no PostgreSQL).

Four figures, each as three rows: tunefleet's value, the minimal server's, and how many
times tunefleet's cost is the minimal server's (latency and CPU: tunefleet / minimal;
rate: minimal / tunefleet), against the target of 1.5x:

- dispatch p50 and p99 at 500 idle connected workers (heartbeating every 30 s), one
  submitter, one job at a time (as bench/dispatch_latency.py);
- job cycles per second with 50 workers and 50 closed-loop submitters, and the server's
  CPU per cycle, all threads, warm-up included (as bench/throughput.py);
- server CPU per heartbeat at 2,500 heartbeats/s sent singly, open loop, from 1,000
  registered workers (as bench/heartbeat_ingestion.py).

Each scenario runs on a fresh server of each kind, one after the other, so both see
about the same load on a shared machine; every row's note carries that load.
``TUNEFLEET_BENCH_QUICK=1``: 100 idle workers, 30 dispatches, 3-second runs.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import Row, row
from bench.fleet_common import Session, cpu_note, machine_note, pick, save_raw, session, summary
from bench.orchestrator_proc import MinimalServer, Orchestrator

SERVERS: dict[str, type[Orchestrator]] = {"tunefleet": Orchestrator, "minimal": MinimalServer}
DISPATCH_WORKERS: int = pick(500, 100)
DISPATCH_SAMPLES: int = pick(200, 30)
CYCLE_WORKERS = 50
SUBMITTERS = 50
CYCLE_S: float = pick(10.0, 3.0)
HEARTBEAT_WORKERS: int = pick(1000, 200)
HEARTBEAT_RATE = 2500.0
HEARTBEAT_S: float = pick(10.0, 3.0)
TARGET = "<= 1.5x of minimal"


@dataclass
class Figure:
    name: str
    unit: str
    higher_is_better: bool = False


@dataclass
class Measured:
    values: dict[str, float]  # figure name -> value
    note: str
    raw: dict[str, Any]


def run() -> list[Row]:
    scenarios: list[tuple[list[Figure], Callable[[Session], Measured]]] = [
        (
            [
                Figure(f"dispatch p50 @{DISPATCH_WORKERS} idle", "ms"),
                Figure(f"dispatch p99 @{DISPATCH_WORKERS} idle", "ms"),
            ],
            _dispatch,
        ),
        (
            [
                Figure(f"job cycles/s, {CYCLE_WORKERS} workers", "cycles/s", True),
                Figure("server CPU per job cycle", "ms"),
            ],
            _cycles,
        ),
        ([Figure(f"server CPU per heartbeat @{HEARTBEAT_RATE:,.0f}/s", "us")], _heartbeats),
    ]
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    lines: list[tuple[str, str, str, str]] = []
    for figures, measure in scenarios:
        measured: dict[str, Measured] = {}
        for kind, server_class in SERVERS.items():
            with session("sqlite", f"yardstick-{kind}", server_class=server_class) as s:
                measured[kind] = measure(s)
                if server_class is MinimalServer:
                    measured[kind].note += _group_commit_note(s.server.port)
            raw[f"{measure.__name__[1:]} {kind}"] = measured[kind].raw
        for figure in figures:
            rows += _figure_rows(figure, measured)
            tf, mini = (measured[k].values[figure.name] for k in SERVERS)
            ratio = _ratio(figure, tf, mini)
            lines.append((figure.name, f"{tf:.3g} {figure.unit}", f"{mini:.3g}", f"{ratio:.2f}x"))
    save_raw("yardstick", raw)
    _print_side_by_side(lines)
    return rows


def _ratio(figure: Figure, tunefleet: float, minimal: float) -> float:
    """How many times tunefleet's cost is the minimal server's (> 1: tunefleet worse)."""
    cost, base = (minimal, tunefleet) if figure.higher_is_better else (tunefleet, minimal)
    return cost / base if base > 0 else float("inf")


def _figure_rows(figure: Figure, measured: dict[str, Measured]) -> list[Row]:
    tf, mini = measured["tunefleet"], measured["minimal"]
    a, b = tf.values[figure.name], mini.values[figure.name]
    how = "minimal / tunefleet" if figure.higher_is_better else "tunefleet / minimal"
    return [
        row(f"{figure.name}: tunefleet", round(a, 3), figure.unit, None, tf.note),
        row(f"{figure.name}: minimal", round(b, 3), figure.unit, None, mini.note),
        row(f"{figure.name}: ratio", round(_ratio(figure, a, b), 2), "x", TARGET, how),
    ]


def _group_commit_note(port: int) -> str:
    """How many writes the minimal server's commits carried, over the whole session."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as resp:
        ready = json.loads(resp.read())
    return f"; {ready['writes']:,} writes in {ready['commits']:,} commits (the session)"


def _print_side_by_side(lines: list[tuple[str, str, str, str]]) -> None:
    header = ("figure (SQLite)", "tunefleet", "minimal", "ratio")
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(4)]
    for line in [header, *lines]:
        print("  ".join(f"{cell:<{widths[i]}}" for i, cell in enumerate(line)).rstrip())


def _dispatch(s: Session) -> Measured:
    s.call("set_mode", on_job="complete")
    s.fleet(DISPATCH_WORKERS)
    s.call("background_heartbeats", interval_s=30.0)
    time.sleep(0.5)  # let registrations and the first heartbeats settle
    reply = s.call("dispatch", samples=DISPATCH_SAMPLES)
    s.call("background_heartbeats", interval_s=0)
    s.call("close_streams")
    latencies = reply["result"]["latencies_ms"]
    stats = summary(latencies)
    return Measured(
        {
            f"dispatch p50 @{DISPATCH_WORKERS} idle": stats["p50"],
            f"dispatch p99 @{DISPATCH_WORKERS} idle": stats["p99"],
        },
        f"{DISPATCH_SAMPLES} samples, one submitter; {cpu_note(reply)}; {machine_note()}",
        {"latencies_ms": latencies, "submit_ms": reply["result"]["submit_ms"]},
    )


def _cycles(s: Session) -> Measured:
    s.fleet(CYCLE_WORKERS)
    s.call("set_mode", on_job="complete")
    reply = s.call("throughput", submitters=SUBMITTERS, duration_s=CYCLE_S)
    s.call("close_streams")
    result = reply["result"]
    cpu_ms = reply.get("server_cpu_s", 0.0) / max(1, result["total_cycles"]) * 1000
    note = (
        f"{SUBMITTERS} submitters, {CYCLE_S:g} s, {result['failures']} failed; "
        f"{cpu_note(reply)}; {machine_note()}"
    )
    return Measured(
        {
            f"job cycles/s, {CYCLE_WORKERS} workers": result["rate"],
            "server CPU per job cycle": cpu_ms,
        },
        note,
        {"cycle_ms": result["cycle_ms"], "server_cpu_s": reply.get("server_cpu_s")},
    )


def _heartbeats(s: Session) -> Measured:
    s.fleet(HEARTBEAT_WORKERS, streams=False)
    reply = s.call("heartbeats", duration_s=HEARTBEAT_S, rate=HEARTBEAT_RATE)
    result = reply["result"]
    cpu_us = reply.get("server_cpu_s", 0.0) / max(1, result["done"]) * 1e6
    stats = summary(result["latencies_ms"])
    note = (
        f"{result['rate']:.0f}/s answered (p99 {stats['p99']:.1f} ms), statuses "
        f"{result['statuses']}, {HEARTBEAT_WORKERS} workers; {cpu_note(reply)}; {machine_note()}"
    )
    return Measured(
        {f"server CPU per heartbeat @{HEARTBEAT_RATE:,.0f}/s": cpu_us},
        note,
        {"latencies_ms": result["latencies_ms"], "statuses": result["statuses"]},
    )
