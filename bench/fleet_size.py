"""Fleet size: how many worker streams one orchestrator process holds (1,000, 5,000,
10,000), its resident memory per stream, and heartbeat latency for all of them at the
seed's 30-second cadence.

The fleet grows on one orchestrator. At each size: RSS after the workers registered,
RSS after their streams opened, then every worker heartbeats once per 30 s (spread
evenly, open loop) while latency is measured. "Per stream" divides the growth since the
empty orchestrator by the streams held, so it includes the worker actor; the stream
alone is the growth when the streams opened.
"""

from __future__ import annotations

import time
from typing import Any

from bench import Row, row
from bench.fleet_common import (
    backends,
    cpu_note,
    histogram_quantile,
    latency_rows,
    machine_note,
    pick,
    save_raw,
    server_histogram,
    session,
    summary,
)
from bench.plots import cdf, scaling

SIZES: tuple[int, ...] = pick((1000, 5000, 10000), (200, 500))
CADENCE_S = 30.0
WINDOW_S: float = pick(30.0, 5.0)
KIB = 1024
HEARTBEAT_ROUTE = "/api/workers/heartbeat"
GROWTH_TIMEOUT_S = 3600.0


def run() -> list[Row]:
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for backend in backends():
        rows += _run_backend(backend, raw)
    save_raw("fleet_size", raw)
    _plot(raw)
    return rows


def _run_backend(backend: str, raw: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    # Growing the fleet to 10,000 takes minutes (worker creation runs at ~50-100/s); the
    # early workers must not time out meanwhile, since they do not heartbeat until the
    # measuring window. A real fleet heartbeats all along; this one is spared instead.
    with session(backend, "fleet", heartbeat_timeout_s=GROWTH_TIMEOUT_S, pool=64) as s:
        time.sleep(0.5)
        empty_rss = s.server.rss_bytes()
        for size in SIZES:
            phases = s.fleet(size, streams=False)
            registered_rss = s.server.rss_bytes()
            opened = s.call("open_streams")
            time.sleep(1.0)
            streams_rss = s.server.rss_bytes()
            held = s.call("status")["result"]["streams"]
            handled_before = server_histogram(s.server.port, HEARTBEAT_ROUTE)
            beats = s.call("heartbeats", rate=size / CADENCE_S, duration_s=WINDOW_S)
            handled = server_histogram(s.server.port, HEARTBEAT_ROUTE)
            result = beats["result"]
            per_stream = (streams_rss - empty_rss) / held
            stream_only = (streams_rss - registered_rss) / max(1, opened["result"]["opened"])
            raw[f"{backend}@{size}"] = {
                "held": held,
                "empty_rss": empty_rss,
                "registered_rss": registered_rss,
                "streams_rss": streams_rss,
                "latencies_ms": result["latencies_ms"],
                "heartbeat_statuses": result["statuses"],
                "send_lag_max_ms": result["send_lag_max_ms"],
                "phases": {k: _cpu(v) for k, v in phases.items()} | {"streams": _cpu(opened)},
                "heartbeats_cpu": _cpu(beats),
            }
            prefix = f"{backend} @{size}"
            create = phases.get("create")
            note = (
                f"opening {opened['result']['opened']} streams took {opened['wall_s']:.1f} s "
                f"({cpu_note(opened)})"
            )
            rows += [
                row(f"{prefix} streams held", held, "streams", f"= {size}", note),
                row(f"{prefix} server RSS", round(streams_rss / KIB**2, 1), "MiB", None, ""),
                row(
                    f"{prefix} RSS per stream",
                    round(per_stream / KIB, 2),
                    "KiB",
                    "<= 24 KiB @10,000",
                    "growth since the empty server / streams: worker actor + stream",
                ),
                row(
                    f"{prefix} RSS of the stream alone",
                    round(stream_only / KIB, 2),
                    "KiB",
                    None,
                    "growth when the streams opened / streams opened",
                ),
            ]
            if create is not None:
                rate = create["result"]["created"] / max(create["wall_s"], 1e-9)
                rows.append(
                    row(
                        f"{prefix} worker creation",
                        round(rate, 1),
                        "workers/s",
                        None,
                        f"admin API, 8 in flight; {cpu_note(create)}",
                    )
                )
            hb_note = (
                f"{result['done']} heartbeats at {size / CADENCE_S:.0f}/s for {WINDOW_S:g} s, "
                f"statuses {result['statuses']}; {cpu_note(beats)}; {machine_note()}"
            )
            targets = {"p99": "<= 20 ms @10,000"}
            rows += latency_rows(
                f"{prefix} heartbeat",
                result["latencies_ms"],
                targets,
                hb_note,
                ("p50", "p99", "max"),
            )
            rows.append(
                row(
                    f"{prefix} heartbeat handler p99",
                    histogram_quantile(handled_before, handled, 0.99),
                    "ms",
                    None,
                    "the server's own histogram (bucket bound): inside the handler, no queueing",
                )
            )
        s.call("close_streams")
    return rows


def _cpu(reply: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in reply.items() if k != "result"}


def _plot(raw: dict[str, Any]) -> None:
    cdf(
        "fleet_size-heartbeat-cdf",
        "Heartbeat latency at the 30 s cadence, by fleet size",
        {key: value["latencies_ms"] for key, value in raw.items()},
    )
    rss: dict[str, list[tuple[float, float]]] = {}
    p99: dict[str, list[tuple[float, float]]] = {}
    for key, value in raw.items():
        backend, size = key.split("@")
        per_stream = (value["streams_rss"] - value["empty_rss"]) / value["held"] / KIB
        rss.setdefault(backend, []).append((float(size), per_stream))
        p99.setdefault(backend, []).append((float(size), summary(value["latencies_ms"])["p99"]))
    scaling(
        "fleet_size-rss",
        "Server RSS per held stream",
        rss,
        "worker streams",
        "KiB per stream",
        target=24.0,
    )
    scaling(
        "fleet_size-heartbeat-p99",
        "Heartbeat p99 at the 30 s cadence",
        p99,
        "worker streams",
        "ms",
        target=20.0,
    )
