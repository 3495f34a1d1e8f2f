"""Python calls per job cycle and per heartbeat on a real orchestrator's event loop:
exact counts, so that what a change adds to each request shows on a loaded machine,
where CPU time per cycle varies by tens of percent from run to run.

The orchestrator runs under ``profiled_server.py`` (cProfile on its main thread, on and
off by signal) and the load generator drives ``throughput``'s workload (50 workers, 50
closed-loop submitters: submit, dispatch, running, completed over HTTP), then heartbeats
sent singly. Only the measured window is profiled, after a warm-up; a cycle is counted
by the one call it makes to ``new_job_id`` and a heartbeat by its ``success_response``,
so cycles under way at the window's edges do not skew the figure. The database thread
is not profiled (``cycle_cpu`` measures it). Calls are a proxy for CPU, not a
measure of it: a call into C that does much counts one.

The raw file holds every function's calls per cycle and per heartbeat, so two trees can
be compared function by function:

    python -m bench.cycle_calls --diff OLD-cycle_calls-raw.json NEW-cycle_calls-raw.json
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import Row, row
from bench.fleet_common import machine_note, pick, save_raw, session
from bench.orchestrator_proc import Orchestrator

WORKERS = 50
SUBMITTERS = 50
WARMUP_S = 1.0
CYCLE_S: float = pick(5.0, 2.0)
HEARTBEAT_S: float = pick(3.0, 1.0)
HEARTBEAT_RATE = 500.0  # a second, open loop: cProfile slows the server several times
# The one call each unit of work makes.
CYCLE_MARKER = "tunefleet/actors/fleet.py:new_job_id"
HEARTBEAT_MARKER = "tunefleet/http/route_table.py:success_response"
_DUMP_WAIT_S = 30.0


class ProfiledOrchestrator(Orchestrator):
    """The orchestrator under ``profiled_server.py``, its stats in its data directory."""

    @property
    def calls_path(self) -> Path:
        return self.data_dir / "calls.prof"

    def command(self) -> list[str]:
        args = super().command()
        if args[1:3] != ["-m", "tunefleet"]:
            raise RuntimeError(f"unexpected server command: {args[:3]}")
        script = Path(__file__).resolve().parent / "profiled_server.py"
        return [args[0], str(script), str(self.calls_path), *args[3:]]


def run() -> list[Row]:
    with session("sqlite", "cycle_calls", server_class=ProfiledOrchestrator) as s:
        server = s.server
        assert isinstance(server, ProfiledOrchestrator)
        s.fleet(WORKERS)
        s.call("set_mode", on_job="complete")
        s.call("throughput", submitters=SUBMITTERS, duration_s=WARMUP_S)
        cycle = _counted(
            server,
            lambda: s.call("throughput", submitters=SUBMITTERS, duration_s=CYCLE_S),
        )
        beat = _counted(
            server,
            lambda: s.call("heartbeats", duration_s=HEARTBEAT_S, rate=HEARTBEAT_RATE),
        )
        s.call("close_streams")
    per_cycle = _per_unit(cycle, CYCLE_MARKER)
    per_beat = _per_unit(beat, HEARTBEAT_MARKER)
    save_raw("cycle_calls", {"per_cycle": per_cycle, "per_heartbeat": per_beat})
    note = "exact counts (cProfile), event loop thread only; " + machine_note()
    return [
        row(
            "Python calls per job cycle, event loop",
            round(sum(per_cycle.values()), 1),
            "calls",
            None,
            f"{WORKERS} workers, {SUBMITTERS} submitters, {cycle[CYCLE_MARKER]:,} cycles; {note}",
        ),
        row(
            "Python calls per heartbeat, event loop",
            round(sum(per_beat.values()), 1),
            "calls",
            None,
            f"{beat[HEARTBEAT_MARKER]:,} heartbeats at {HEARTBEAT_RATE:,.0f}/s sent singly; {note}",
        ),
    ]


def _counted(server: ProfiledOrchestrator, load: Callable[[], Any]) -> dict[str, int]:
    """Calls per function while ``load`` runs, profiled from its start to its end."""
    path = server.calls_path
    path.unlink(missing_ok=True)
    os.kill(server.pid, signal.SIGUSR1)
    try:
        load()
    finally:
        os.kill(server.pid, signal.SIGUSR2)
    deadline = time.monotonic() + _DUMP_WAIT_S
    while not path.exists() or path.stat().st_size == 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server wrote no profile to {path}")
        time.sleep(0.05)
    time.sleep(0.2)  # written in one go by the signal handler; let it finish
    return calls_by_function(pstats.Stats(str(path)))


def calls_by_function(stats: pstats.Stats) -> dict[str, int]:
    """``path:function`` → calls; the path from the package on (``tunefleet/...``,
    ``aiohttp/...``), so that two checkouts' counts line up."""
    calls: dict[str, int] = {}
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    for (filename, _line, function), (_primitive, total, *_rest) in raw.items():
        key = f"{_short(filename)}:{function}"
        calls[key] = calls.get(key, 0) + total
    return calls


def _short(filename: str) -> str:
    if "/site-packages/" in filename:
        return filename.rsplit("/site-packages/", 1)[1]
    for package in ("/tunefleet/", "/bench/"):
        at = filename.rfind(package)
        if at >= 0:
            return filename[at + 1 :]
    stdlib = re.search(r"/lib/python3\.\d+/(.*)$", filename)
    return stdlib.group(1) if stdlib else filename


def _per_unit(calls: dict[str, int], marker: str) -> dict[str, float]:
    units = calls.get(marker, 0)
    if units == 0:
        raise RuntimeError(f"no call to {marker} in the window: nothing was measured")
    return {key: count / units for key, count in calls.items() if count / units >= 0.01}


def diff(old_path: Path, new_path: Path, top: int = 40) -> str:
    """The functions whose calls per cycle and per heartbeat changed most, old → new."""
    old, new = json.loads(old_path.read_text()), json.loads(new_path.read_text())
    lines: list[str] = []
    for unit in ("per_cycle", "per_heartbeat"):
        before, after = old[unit], new[unit]
        lines.append(
            f"{unit}: {sum(before.values()):,.1f} → {sum(after.values()):,.1f} calls "
            f"({sum(after.values()) - sum(before.values()):+,.1f})"
        )
        changed = sorted(
            set(before) | set(after),
            key=lambda k: -abs(after.get(k, 0.0) - before.get(k, 0.0)),
        )
        for key in changed[:top]:
            was, now = before.get(key, 0.0), after.get(key, 0.0)
            if abs(now - was) >= 0.05:
                lines.append(f"  {was:8.2f} {now:8.2f} {now - was:+8.2f}  {key}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cycle_calls", description=__doc__)
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = parser.parse_args(argv)
    if args.diff:
        print(diff(*args.diff))
        return 0
    for r in run():
        print(f"{r['name']}: {r['value']} {r['unit']} ({r['note']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
