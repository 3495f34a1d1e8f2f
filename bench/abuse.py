"""`bench abuse`: the attacks of issue 23 ("Hostile input from inside") repeated on ONE
real orchestrator process (SQLite, a temporary data directory), while a second client,
a load-generator process connecting from 127.0.0.1, measures what a well-behaved user
sees: a simulated worker's heartbeats (over the wire protocol, keep-alive) and an admin
API GET (a fresh connection each, as the CLI or a page load makes).

First an idle baseline, then each attack for ``--seconds`` (bounded in count too): (a)
log flood, (b) progress flood with 20 /api/events readers, (c) metrics CSV loop, (d)
API-token and (e) worker-token guesses, (f) trickling connections, and (g) a full disk
on a small tmpfs with an orchestrator of its own (bench/abuse_disk.py; skipped, with
the reason printed, where no tmpfs can be mounted). The attacker connects from
127.0.0.2, so per-address bounds tell it apart from the measuring client.

Per attack: the data directory's growth (allocated bytes) and the server's RSS growth
(/proc), heartbeat and API GET p50/p99 beside the baseline's, the attacker's request
rate and the server's answers (status counts), the server's CPU. The bounds are passed
on the server's command line (``Bounds``), small, so each quota is reached in a run;
each row's target is derived from them. Run alone with
``python -m bench.abuse --seconds 5 [--only abc] [--connections 1200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import Row, row
from bench.abuse_attacks import (
    ATTACKS,
    RSS_TARGET_MIB,
    Arena,
    Attack,
    Bounds,
    MiB,
    Outcome,
    Settings,
)
from bench.abuse_client import answers
from bench.abuse_disk import dir_bytes, disk_full
from bench.fleet_common import cpu_note, machine_note, percentile, save_raw
from bench.loadgen import LoadGenProcess
from bench.orchestrator_proc import Orchestrator, raise_open_file_limit
from bench.simulated_worker import api, first_worker_takes

# Every attack is held to it, those that keep the server's CPU busy by themselves (a
# for its seconds, c, d and e throughout: see each one's "server CPU" row) included.
LATENCY_FACTOR = 3  # heartbeat and API GET p99 within 3x of the baseline's
SERVER_OPEN_FILES = 1024  # a common default soft limit; issue 23's finding 6 ran at it


def run() -> list[Row]:
    return run_abuse(Settings())


def run_abuse(settings: Settings) -> list[Row]:
    raise_open_file_limit()  # (f) opens more sockets than a default soft limit allows
    bounds = Bounds()
    rows: list[Row] = []
    raw: dict[str, Any] = {"seconds": settings.seconds}
    with tempfile.TemporaryDirectory(prefix="tunefleet-bench-abuse-") as tmp:
        work = Path(tmp)
        server = Orchestrator(
            work / "data", extra_args=bounds.server_args(), open_file_limit=SERVER_OPEN_FILES
        )
        server.start()
        try:
            arena = _arena(server, bounds, settings)
            gen = LoadGenProcess(server.port, server.pid, work / "probe.log", pool=4).start()
            try:
                gen.call("create_workers", count=1)
                gen.call("register")
                gen.call("open_streams")
                rows += _measure_all(server, gen, arena, raw)
            finally:
                gen.close()
        except Exception:
            print(f"server log tail:\n{server.log_tail()}")
            raise
        finally:
            server.stop()
        if "g" in settings.only:
            rows += disk_full(work, bounds)
    save_raw("abuse", raw)
    return rows


def _arena(server: Orchestrator, bounds: Bounds, settings: Settings) -> Arena:
    """The attackers' workers, each running a job, and a reading API token. Made before
    the measuring worker exists, so no job goes to it."""
    log_job = first_worker_takes(server, "bench-log-flooder", {"max_train_steps": 1})
    progress_job = first_worker_takes(server, "bench-progress-flooder", {"max_train_steps": 1})
    reader = api(
        server, "POST", "/api/admin/tokens", {"name": "bench-reader", "permissions": ["audit.read"]}
    )
    return Arena(
        port=server.port,
        bounds=bounds,
        settings=settings,
        reader_token=reader["token"],
        log_job=log_job,
        progress_job=progress_job,
    )


@dataclass
class Phase:
    """One measured stretch: the probe's samples, and the server before and after."""

    probe: dict[str, Any]  # the load generator's reply to "probe"
    outcome: Outcome | None
    attack_s: float
    disk_growth: int
    rss_growth: int
    cpu_share: float

    def latency(self, kind: str, q: float) -> float:
        return percentile(self.probe["result"][kind]["latencies_ms"], q)

    def failures(self) -> tuple[int, str]:
        """Probe requests not answered 200, and all answers, per kind."""
        bad, parts = 0, []
        for kind in ("heartbeat", "get"):
            statuses = self.probe["result"][kind]["statuses"]
            bad += sum(n for status, n in statuses.items() if status != "200")
            parts.append(f"{kind}: {answers(statuses)}")
        return bad, "; ".join(parts)


def _phase(server: Orchestrator, gen: LoadGenProcess, arena: Arena, attack: Attack | None) -> Phase:
    disk0, rss0, cpu0 = dir_bytes(server.data_dir), server.rss_bytes(), server.sample()
    probe, outcome, attack_s = asyncio.run(_together(gen, arena, attack))
    _, cpu_share = server.sample().cpu_since(cpu0)
    return Phase(
        probe=probe,
        outcome=outcome,
        attack_s=attack_s,
        disk_growth=dir_bytes(server.data_dir) - disk0,
        rss_growth=server.rss_bytes() - rss0,
        cpu_share=cpu_share,
    )


async def _together(
    gen: LoadGenProcess, arena: Arena, attack: Attack | None
) -> tuple[dict[str, Any], Outcome | None, float]:
    """The probe (in its own process, waited on in a thread) beside the attack."""
    seconds = arena.settings.seconds
    probe = asyncio.to_thread(gen.call, "probe", timeout_s=seconds + 120, duration_s=seconds)
    if attack is None:
        return await probe, None, 0.0

    async def timed() -> tuple[Outcome, float]:
        started = time.monotonic()
        outcome = await attack(arena)
        return outcome, time.monotonic() - started

    reply, (outcome, attack_s) = await asyncio.gather(probe, timed())
    return reply, outcome, attack_s


def _measure_all(
    server: Orchestrator, gen: LoadGenProcess, arena: Arena, raw: dict[str, Any]
) -> list[Row]:
    base = _phase(server, gen, arena, None)
    raw["baseline"] = base.probe["result"]
    rows = _probe_rows("baseline", base, None, "idle: no attack")
    for letter, name, attack, prepare in ATTACKS:
        if letter not in arena.settings.only:
            continue
        if prepare is not None:
            asyncio.run(prepare(arena))
        phase = _phase(server, gen, arena, attack)
        if phase.outcome is None:
            raise RuntimeError(f"{letter} {name}: the attack returned no outcome")
        raw[letter] = phase.probe["result"]
        rows += _attack_rows(f"{letter} {name}", phase, phase.outcome, base)
    return rows


def _probe_rows(prefix: str, phase: Phase, base: Phase | None, note: str) -> list[Row]:
    rows = []
    for kind, label in (("heartbeat", "heartbeat"), ("get", "API GET")):
        for q in (50, 99):
            value = round(phase.latency(kind, q), 2)
            target = None
            if base is not None and q == 99:
                limit = LATENCY_FACTOR * base.latency(kind, 99)
                target = f"<= {limit:.1f} ({LATENCY_FACTOR}x baseline)"
            base_note = f"baseline {base.latency(kind, q):.1f} ms; " if base else ""
            rows.append(row(f"{prefix}: {label} p{q}", value, "ms", target, base_note + note))
    bad, answers = phase.failures()
    rows.append(row(f"{prefix}: probe answers not 200", bad, "requests", "0", answers))
    return rows


def _attack_rows(prefix: str, phase: Phase, outcome: Outcome, base: Phase) -> list[Row]:
    tally = outcome.tally
    rate = tally.requests / max(phase.attack_s, 1e-9)
    rows = [
        row(
            f"{prefix}: attacker rate",
            round(rate, 1),
            "req/s",
            None,
            f"{tally.requests:,} in {phase.attack_s:.1f} s; answers: {tally.answers()}"
            + (f"; {outcome.note}" if outcome.note else ""),
        ),
        row(
            f"{prefix}: disk growth",
            round(phase.disk_growth / MiB, 2),
            "MiB",
            f"<= {outcome.disk_target_mib:g}",
            f"{outcome.disk_target_note}; baseline grew {base.disk_growth / MiB:.2f} MiB",
        ),
        row(
            f"{prefix}: RSS growth",
            round(phase.rss_growth / MiB, 1),
            "MiB",
            f"<= {RSS_TARGET_MIB}",
            "server RSS after - before (/proc)",
        ),
        row(
            f"{prefix}: server CPU", round(phase.cpu_share * 100), "%", None, cpu_note(phase.probe)
        ),
    ]
    rows += _probe_rows(prefix, phase, base, machine_note())
    return rows + [
        row(f"{prefix}: {r['name']}", r["value"], r["unit"], r["target"], r["note"])
        for r in outcome.rows
    ]


def main(argv: Sequence[str] | None = None) -> int:
    from bench.__main__ import render_table, write_results

    defaults = Settings()
    parser = argparse.ArgumentParser(
        prog="python -m bench.abuse",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=defaults.seconds, help="per attack")
    parser.add_argument("--only", default=defaults.only, help="attack letters, e.g. ade")
    parser.add_argument(
        "--connections",
        type=int,
        default=defaults.connections,
        help="trickling connections of attack f",
    )
    parser.add_argument(
        "--csv-history",
        type=int,
        default=defaults.csv_history_reports,
        help="progress reports behind the metric history attack c downloads",
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or not set(args.only) <= set(defaults.only):
        parser.error(f"--seconds must be positive and --only letters from {defaults.only}")
    settings = dataclasses.replace(
        defaults,
        seconds=args.seconds,
        only=args.only,
        connections=args.connections,
        csv_history_reports=args.csv_history,
    )
    started = time.monotonic()
    rows: list[dict[str, Any]] = [dict(r) for r in run_abuse(settings)]
    print(render_table(rows))
    path = write_results("abuse", rows, time.monotonic() - started)
    print(f"(wrote {os.path.relpath(path)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
