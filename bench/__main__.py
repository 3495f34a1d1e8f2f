"""Run benchmarks: `python -m bench [names...]` (all of them when none is named).

Each prints a table and writes bench/results/<name>.json. A benchmark that fails is
reported and the others still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import logging
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

# The registry: module names under bench/, each with `run() -> list[dict]`. Add yours here.
BENCHMARKS: tuple[str, ...] = (
    "actor_cost",
    "scheduler_plan",
    "tenancy_pass",
    "fairshare",
    "domain_actor_cost",
    "commit_path",
    "cycle_cpu",
    "cycle_calls",
    "queued_submit",
    "dispatch_latency",
    "throughput",
    "fleet_size",
    "heartbeat_ingestion",
    "failure_detection",
    "restart",
    "agent_artifacts",
    "artifact_upload",
    "departed_workers",
    "metric_history",
    "takeover",
    "yardstick",
    "abuse",
    "blackhole",
    "preemption",
    "webhooks",
)

RESULTS_DIR = Path(__file__).resolve().parent / "results"
ROW_KEYS = ("name", "value", "unit", "target", "note")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)}")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--logs", action="store_true", help="show info logs (default: warnings)")
    args = parser.parse_args(argv)
    if not args.logs:
        # Info lines would interleave with the tables; warnings still show.
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.list:
        print("\n".join(BENCHMARKS))
        return 0
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    failed = [name for name in args.names or BENCHMARKS if not run_one(name)]
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def run_one(name: str) -> bool:
    print(f"\n== {name} ==", flush=True)
    started = time.perf_counter()
    try:
        module = importlib.import_module(f"bench.{name}")
        rows = check_rows(name, module.run())
    except Exception:
        traceback.print_exc()
        return False
    duration_s = time.perf_counter() - started
    print(render_table(rows))
    path = write_results(name, rows, duration_s)
    print(f"({duration_s:.1f} s; wrote {os.path.relpath(path)})")
    return True


def check_rows(name: str, rows: object) -> list[dict[str, Any]]:
    if not isinstance(rows, list):
        raise TypeError(f"bench.{name}.run() must return a list of rows, not {type(rows).__name__}")
    for row in rows:
        if not isinstance(row, dict) or tuple(sorted(row)) != tuple(sorted(ROW_KEYS)):
            raise ValueError(f"bench.{name}: a row must have exactly the keys {ROW_KEYS}: {row!r}")
    return rows


def format_value(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def render_table(rows: list[dict[str, Any]]) -> str:
    header = ("name", "value", "unit", "target", "note")
    cells = [
        (str(r["name"]), format_value(r["value"]), str(r["unit"]), r["target"] or "-", r["note"])
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(4)]
    lines = []
    for line in [header, *cells]:
        name, value, unit, target, note = line
        lines.append(
            f"{name:<{widths[0]}}  {value:>{widths[1]}}  {unit:<{widths[2]}}  "
            f"{target:<{widths[3]}}  {note}".rstrip()
        )
    lines.insert(1, "-" * max(len(line) for line in lines))
    return "\n".join(lines)


def write_results(name: str, rows: list[dict[str, Any]], duration_s: float) -> Path:
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    record = {
        "benchmark": name,
        "recorded_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 2),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "rows": rows,
    }
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


if __name__ == "__main__":
    sys.exit(main())
