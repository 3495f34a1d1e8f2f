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

A third server, for dispatch and job cycles: the minimal server storing the rows
tunefleet stores per job (``--records tunefleet``: job, attempt, upload credential,
timeline, hash-chained audit and its file lines, in tunefleet's transactions and tables).
Its two rows per figure (its value, and tunefleet's cost against it) say how much of the
gap to the minimal server those rows explain. Heartbeats write nothing new: not run.

Each scenario runs on a fresh server of each kind, one after the other, so they see
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
from bench.orchestrator_proc import MinimalServer, MinimalServerWithRows, Orchestrator

ROWS = "minimal + rows"  # the minimal server storing tunefleet's rows
SERVERS: dict[str, type[Orchestrator]] = {
    "tunefleet": Orchestrator,
    "minimal": MinimalServer,
    ROWS: MinimalServerWithRows,
}
ALL = tuple(SERVERS)
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
    scenarios: list[tuple[list[Figure], Callable[[Session], Measured], tuple[str, ...]]] = [
        (
            [
                Figure(f"dispatch p50 @{DISPATCH_WORKERS} idle", "ms"),
                Figure(f"dispatch p99 @{DISPATCH_WORKERS} idle", "ms"),
            ],
            _dispatch,
            ALL,
        ),
        (
            [
                Figure(f"job cycles/s, {CYCLE_WORKERS} workers", "cycles/s", True),
                Figure("server CPU per job cycle", "ms"),
            ],
            _cycles,
            ALL,
        ),
        (
            [Figure(f"server CPU per heartbeat @{HEARTBEAT_RATE:,.0f}/s", "us")],
            _heartbeats,
            ("tunefleet", "minimal"),  # a heartbeat stores nothing of tunefleet's rows
        ),
    ]
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    lines: list[tuple[str, ...]] = []
    for figures, measure, kinds in scenarios:
        measured: dict[str, Measured] = {}
        for kind in kinds:
            server_class = SERVERS[kind]
            name = f"yardstick-{kind.replace(' + ', '-')}"
            with session("sqlite", name, server_class=server_class) as s:
                measured[kind] = measure(s)
                if issubclass(server_class, MinimalServer):
                    measured[kind].note += _group_commit_note(s.server.port)
            raw[f"{measure.__name__[1:]} {kind}"] = measured[kind].raw
        for figure in figures:
            rows += _figure_rows(figure, measured)
            tf, mini = (measured[k].values[figure.name] for k in ("tunefleet", "minimal"))
            ratio = _ratio(figure, tf, mini)
            line = [figure.name, f"{tf:.3g} {figure.unit}", f"{mini:.3g}", f"{ratio:.2f}x"]
            with_rows = measured.get(ROWS)
            if with_rows is not None:
                value = with_rows.values[figure.name]
                line += [f"{value:.3g}", f"{_ratio(figure, tf, value):.2f}x"]
            lines.append(tuple(line))
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
    rows = [
        row(f"{figure.name}: tunefleet", round(a, 3), figure.unit, None, tf.note),
        row(f"{figure.name}: minimal", round(b, 3), figure.unit, None, mini.note),
        row(f"{figure.name}: ratio", round(_ratio(figure, a, b), 2), "x", TARGET, how),
    ]
    with_rows = measured.get(ROWS)
    if with_rows is not None:
        c = with_rows.values[figure.name]
        how = how.replace("minimal", "minimal + rows")
        rows += [
            row(f"{figure.name}: minimal + tunefleet's rows", round(c, 3), figure.unit, None,
                with_rows.note),
            row(f"{figure.name}: ratio to minimal + rows", round(_ratio(figure, a, c), 2), "x",
                None, how),
        ]  # fmt: skip
    return rows


def _group_commit_note(port: int) -> str:
    """How many writes the minimal server's commits carried, over the whole session."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as resp:
        ready = json.loads(resp.read())
    return f"; {ready['writes']:,} writes in {ready['commits']:,} commits (the session)"


def _print_side_by_side(lines: list[tuple[str, ...]]) -> None:
    header = ("figure (SQLite)", "tunefleet", "minimal", "ratio", "minimal + rows", "ratio")
    table = [header, *(line + ("-", "-")[: len(header) - len(line)] for line in lines)]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
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
