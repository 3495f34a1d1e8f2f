"""What the fleet benchmarks share: sizes (full or quick), backends, one orchestrator
plus one load generator per run, percentiles, and the CPU notes every row carries.

``TUNEFLEET_BENCH_QUICK=1`` picks small sizes so the whole suite stays within minutes;
``TUNEFLEET_BENCH_BACKENDS=sqlite`` (or ``postgresql``) runs one backend only.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import Row, row
from bench.loadgen import LoadGenProcess
from bench.orchestrator_proc import Orchestrator, postgres_available, postgres_schema

QUICK = os.environ.get("TUNEFLEET_BENCH_QUICK", "") not in ("", "0")
RESULTS_DIR = Path(__file__).resolve().parent / "results"
# A load generator using more than this share of its core is the limit, not the server.
LOADGEN_BOUND_SHARE = 0.85


def pick(full: Any, quick: Any) -> Any:
    return quick if QUICK else full


def backends() -> list[str]:
    wanted = os.environ.get("TUNEFLEET_BENCH_BACKENDS", "sqlite,postgresql").split(",")
    names = [name.strip() for name in wanted if name.strip()]
    if "postgresql" in names and not postgres_available():
        names.remove("postgresql")
    return names


@dataclass
class Session:
    backend: str
    server: Orchestrator
    gen: LoadGenProcess
    work_dir: Path

    def call(self, cmd: str, timeout_s: float = 900.0, **params: Any) -> dict[str, Any]:
        return self.gen.call(cmd, timeout_s=timeout_s, **params)

    def fleet(self, count: int, streams: bool = True) -> dict[str, Any]:
        """Grow the fleet to ``count`` workers: created, registered, streams open.
        Returns the phases' replies (for their times and CPU)."""
        have = self.call("status")["result"]["workers"]
        phases: dict[str, Any] = {}
        if count > have:
            phases["create"] = self.call("create_workers", count=count - have)
        phases["register"] = self.call("register")
        if streams:
            phases["streams"] = self.call("open_streams")
        return phases


@contextlib.contextmanager
def session(
    backend: str,
    name: str,
    heartbeat_timeout_s: float = 120.0,
    pool: int = 32,
    server_class: type[Orchestrator] = Orchestrator,
) -> Iterator[Session]:
    """A fresh orchestrator on ``backend`` and a load generator aimed at it (or, with
    ``server_class=MinimalServer``, the yardstick on SQLite)."""
    work_dir = Path(tempfile.mkdtemp(prefix=f"tunefleet-bench-{name}-"))
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(postgres_schema()) if backend == "postgresql" else None
        server = server_class(
            work_dir / "server",
            url,
            heartbeat_timeout_s=heartbeat_timeout_s,
            profile_name=f"{name}-{backend}",
        )
        server.start()
        stack.callback(server.stop)
        gen = LoadGenProcess(server.port, server.pid, work_dir / "loadgen.log", pool=pool)
        gen.start()
        stack.callback(gen.close)
        try:
            yield Session(backend, server, gen, work_dir)
        except Exception:
            print(f"server log tail ({backend}):\n{server.log_tail()}")
            raise
    shutil.rmtree(work_dir, ignore_errors=True)


# --- numbers ------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values) if values else float("nan"),
        "n": float(len(values)),
    }


def cpu_note(reply: dict[str, Any]) -> str:
    """``server 63% / loadgen 12% CPU``, flagged when the load generator is the limit;
    with the load generator's own event-loop lag when it was late by 50 ms or more."""
    server = reply.get("server_cpu_share")
    loadgen = reply.get("loadgen_cpu_share", 0.0)
    text = f"server {server:.0%}" if server is not None else "server ?"
    text += f" / loadgen {loadgen:.0%} CPU"
    if loadgen >= LOADGEN_BOUND_SHARE:
        text += " (LOADGEN-BOUND)"
    lag = reply.get("loadgen_lag_max_ms", 0.0)
    if lag >= 50:
        text += f"; loadgen loop late by up to {lag:.0f} ms"
    return text


def server_histogram(port: int, route: str) -> dict[float, float]:
    """Cumulative counts of the server's own request-duration histogram for one route
    (all statuses): upper bound in seconds → requests at or under it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    prefix = "tunefleet_http_request_duration_seconds_bucket{"
    counts: dict[float, float] = {}
    for line in text.splitlines():
        if not line.startswith(prefix) or f'route="{route}"' not in line:
            continue
        labels, _, value = line[len(prefix) :].partition("} ")
        bound = labels.split('le="', 1)[1].split('"', 1)[0]
        upper = float("inf") if bound == "+Inf" else float(bound)
        counts[upper] = counts.get(upper, 0.0) + float(value)
    return counts


def histogram_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The bucket bound (ms) under which ``q`` (0..1) of the requests between two scrapes
    were handled: the server's own time in the handler, queueing before it excluded."""
    deltas = sorted((bound, after.get(bound, 0.0) - before.get(bound, 0.0)) for bound in after)
    total = deltas[-1][1] if deltas else 0.0
    for bound, count in deltas:
        if total and count >= q * total:
            return bound * 1000
    return float("nan")


def machine_note() -> str:
    """The machine's load: load average, and CPU pressure (the share of the last 10 s
    in which some runnable task waited for a CPU) where the kernel reports it."""
    one, five, _ = os.getloadavg()
    note = f"load avg {one:.1f}/{five:.1f} on {os.cpu_count()} CPUs"
    try:
        with open("/proc/pressure/cpu") as pressure:
            some = pressure.readline().split()[1].split("=")[1]
        note += f", CPU pressure {float(some):.0f}%"
    except (OSError, IndexError, ValueError):
        pass
    return note


def latency_rows(
    prefix: str,
    values: Sequence[float],
    targets: Mapping[str, str | None],
    note: str,
    keys: Sequence[str] = ("p50", "p95", "p99", "max"),
) -> list[Row]:
    stats = summary(values)
    return [
        row(f"{prefix} {key}", round(stats[key], 3), "ms", targets.get(key), note) for key in keys
    ]


def save_raw(name: str, data: dict[str, Any]) -> Path:
    """The raw samples behind the rows, beside the runner's own results file."""
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}-raw.json"
    payload = {"recorded_at": time.time(), "quick": QUICK, "machine": machine_note(), **data}
    path.write_text(json.dumps(payload) + "\n")
    return path
