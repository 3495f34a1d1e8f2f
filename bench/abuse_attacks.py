"""The attacks of `bench abuse` (issue 23, "Hostile input from inside"), each against a
running orchestrator, bounded in time and in count, stopping by itself.

Each returns an ``Outcome``: what the attacker sent and how it was answered, plus rows
of its own (names without the attack's prefix; bench/abuse.py adds it and the rows
every attack shares). Targets come from ``Bounds``, the limits the server was started
with, so a row says what the configured quota allows next to what was measured.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from bench import Row, row
from bench.abuse_client import Tally, flood, one_request, open_readers, trickle
from bench.fleet_common import QUICK
from bench.loadgen_http import build_request
from tunefleet.protocol.endpoints import log_line
from tunefleet.tokens import new_api_token, new_worker_token

KiB = 1024
MiB = 1024**2
# The stored metric history keeps at most this many numbers of one report
# (tunefleet/storage/store_metrics.py); the progress flood sends that many new ones.
METRICS_PER_REPORT = 32
# Each report alone is well within the bounds (40 keys, ~37 KB, under its 64 KiB cap);
# merged, the 7th passes both 256 keys and 256 KiB. 216 make ~8 MB, as in issue 23.
PAD = "x" * 4500
PADS_PER_REPORT = 8
LOG_LINE = "y" * 8000  # under the 8,192-character line cap
# ~0.97 MB a batch: under the 1 MiB body limit, so the quota is what stops the flood.
LOG_LINES_PER_BATCH = 120
SUBSCRIBERS = 20
RSS_TARGET_MIB = 64
# What an attack whose input is bounded may add to the data directory: the WAL of the
# writes it is allowed, and the audit of refusals within their window.
SMALL_DISK_TARGET_MIB = 8
REFUSALS_DISK_TARGET_MIB = 1


@dataclass(frozen=True)
class Bounds:
    """The limits `bench abuse` passes to the server explicitly (tunefleet/limits.py):
    small ones, so each quota is visibly reached within a run."""

    log_bytes_per_attempt: int = 8 * MiB
    body_bytes: int = 1 * MiB
    progress_keys: int = 256
    progress_bytes: int = 256 * KiB
    auth_failures_per_window: int = 20
    auth_failure_window_s: float = 60.0
    connections_per_address: int = 256
    request_header_timeout_s: float = 2.0
    min_free_disk: str = "1GiB,5%"

    def server_args(self) -> list[str]:
        flags = {
            "--max-log-bytes-per-attempt": self.log_bytes_per_attempt,
            "--max-body-bytes": self.body_bytes,
            "--max-progress-keys": self.progress_keys,
            "--max-progress-bytes": self.progress_bytes,
            "--auth-failures-per-window": self.auth_failures_per_window,
            "--auth-failure-window": self.auth_failure_window_s,
            "--max-connections-per-address": self.connections_per_address,
            "--request-header-timeout": self.request_header_timeout_s,
            "--min-free-disk": self.min_free_disk,
        }
        return [
            text
            for flag, value in flags.items()
            for text in (flag, f"{value:g}" if isinstance(value, float) else str(value))
        ]

    def failures_allowed(self, seconds: float) -> int:
        """401s one address may get in ``seconds``: a window's worth per window begun."""
        windows = math.ceil(seconds / self.auth_failure_window_s)
        return self.auth_failures_per_window * windows


@dataclass(frozen=True)
class Settings:
    """How long and how much each attack sends (`python -m bench.abuse --help`)."""

    seconds: float = 5.0 if QUICK else 15.0
    connections: int = 1200  # (f) trickling connections
    only: str = "abcdefg"
    log_flood_bytes: int = 512 * MiB  # (a) the most it sends
    progress_reports: int = 400  # (b) the most it sends
    csv_history_reports: int = 216  # (c) reads the history of this many (issue 23's count)


@dataclass
class Arena:
    """What the attacks are aimed at, made before the measuring starts."""

    port: int
    bounds: Bounds
    settings: Settings
    reader_token: str  # an API token with the least permission (audit.read)
    log_job: dict[str, Any]  # job_submit (+ worker_token) of a job its worker runs
    progress_job: dict[str, Any]
    progress_sent: int = 0  # reports sent to progress_job so far (its metric history)

    def worker_post(self, job: dict[str, Any], path: str, body: Any) -> bytes:
        headers = {"X-Worker-Token": job["worker_token"]}
        return build_request("POST", path, self._host, body, headers)

    def reader_get(self, path: str) -> bytes:
        headers = {"Authorization": f"Bearer {self.reader_token}"}
        return build_request("GET", path, self._host, None, headers)

    @property
    def _host(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class Outcome:
    tally: Tally
    rows: list[Row] = field(default_factory=list)
    note: str = ""  # beside the attacker's rate
    disk_target_mib: float = SMALL_DISK_TARGET_MIB
    disk_target_note: str = "what is allowed is bounded (WAL and audit of it)"


Attack = Callable[[Arena], Coroutine[Any, Any, Outcome]]
Prepare = Callable[[Arena], Coroutine[Any, Any, None]]


def log_batch(attempt: int, first_seq: int, lines: int) -> dict[str, Any]:
    """A log batch of ``lines`` new lines of LOG_LINE, from ``first_seq`` on."""
    now = time.time()
    batch = [log_line(first_seq + n, "stdout", LOG_LINE, now) for n in range(lines)]
    return {"attempt": attempt, "lines": batch}


async def log_flood(arena: Arena) -> Outcome:
    """(a) A worker token posts 4 MB log batches for the job it runs, from two lanes,
    each line new (rising seq), up to ``log_flood_bytes``."""
    job = arena.log_job
    path = f"/api/workers/job/{job['job_id']}/logs"
    batch_bytes = LOG_LINES_PER_BATCH * len(LOG_LINE)
    stored = [0]

    def batch(i: int) -> bytes:
        body = log_batch(job["attempt"], i * LOG_LINES_PER_BATCH, LOG_LINES_PER_BATCH)
        return arena.worker_post(job, path, body)

    def counted(status: str, body: bytes) -> None:
        if status == "200":
            stored[0] += int(json.loads(body).get("stored", 0))

    batches = max(1, arena.settings.log_flood_bytes // batch_bytes)
    tally = await flood(arena.port, 2, arena.settings.seconds, batches, batch, counted)
    quota = arena.bounds.log_bytes_per_attempt
    stored_mib = stored[0] * len(LOG_LINE) / MiB
    return Outcome(
        tally,
        [
            row(
                "log bytes the server said it stored",
                round(stored_mib, 1),
                "MiB",
                f"<= {quota / MiB:g} (--max-log-bytes-per-attempt)",
                f"{stored[0]:,} lines of {len(LOG_LINE):,} characters",
            )
        ],
        note=f"{tally.bytes_sent / MiB:,.0f} MiB sent",
        disk_target_mib=3 * quota / MiB,
        disk_target_note="3x the log quota of the one attempt (rows, index, WAL)",
    )


def progress_report(n: int, attempt: int) -> dict[str, Any]:
    """Report ``n``: a new step, METRICS_PER_REPORT new metric names and PADS_PER_REPORT
    new keys of PAD."""
    progress: dict[str, Any] = {"step": n}
    progress.update({f"m{n}_{i}": float(i) for i in range(METRICS_PER_REPORT)})
    progress.update({f"p{n}_{i}": PAD for i in range(PADS_PER_REPORT)})
    return {"status": "running", "attempt": attempt, "progress": progress}


async def send_progress(arena: Arena, reports: int, seconds: float) -> Tally:
    """Progress reports with new keys for the progress job, from two lanes."""
    job = arena.progress_job
    path = f"/api/workers/job/{job['job_id']}/status"
    first = arena.progress_sent

    def report(i: int) -> bytes:
        return arena.worker_post(job, path, progress_report(first + i, job["attempt"]))

    tally = await flood(arena.port, 2, seconds, reports, report)
    arena.progress_sent += tally.requests
    return tally


async def progress_flood(arena: Arena) -> Outcome:
    """(b) Progress reports with new keys while 20 pages read /api/events."""
    job_id = arena.progress_job["job_id"]
    request = arena.reader_get("/api/events")
    readers = await open_readers(arena.port, request, SUBSCRIBERS)
    try:
        tally = await send_progress(arena, arena.settings.progress_reports, arena.settings.seconds)
        await asyncio.sleep(0.5)  # what the server already sent reaches the readers
    finally:
        for reader in readers:
            reader.close()
    received = sum(r.received for r in readers)
    accepted = max(1, tally.statuses.get("200", 0))
    per_report_kib = received / len(readers) / accepted / KiB
    bound = arena.bounds.progress_bytes
    status, body = await one_request(arena.port, arena.reader_get(f"/api/queue/{job_id}"))
    merged = len(json.dumps(json.loads(body).get("progress"))) if status == "200" else -1
    return Outcome(
        tally,
        [
            row(
                f"bytes to {len(readers)} /api/events readers",
                round(received / MiB, 1),
                "MiB",
                None,
                f"reader statuses: {sorted({r.status or 'none' for r in readers})}",
            ),
            row(
                "bytes per accepted report per reader",
                round(per_report_kib, 1),
                "KiB",
                f"<= {bound / KiB:g} (--max-progress-bytes)",
                f"{accepted:,} reports accepted",
            ),
            row(
                "merged progress object stored",
                round(merged / KiB, 1),
                "KiB",
                f"<= {bound / KiB:g} (--max-progress-bytes)",
                "the job's progress as JSON, read back after the attack",
            ),
        ],
    )


async def seed_metric_history(arena: Arena) -> None:
    """Before (c), unmeasured: the reports (b) did not send topped up to
    ``csv_history_reports`` (issue 23 measured the CSV after 216)."""
    missing = arena.settings.csv_history_reports - arena.progress_sent
    if missing > 0:
        await send_progress(arena, missing, seconds=120)


async def metrics_csv_loop(arena: Arena) -> Outcome:
    """(c) The least-privileged API token downloads the progress job's metric history
    as CSV in a loop, from two lanes."""
    job_id = arena.progress_job["job_id"]
    request = arena.reader_get(f"/api/queue/{job_id}/metrics?format=csv")
    shape = {"bytes": 0, "columns": 0}

    def measured(status: str, body: bytes) -> None:
        if status == "200" and not shape["bytes"]:
            shape["bytes"] = len(body)
            shape["columns"] = body.split(b"\n", 1)[0].count(b",") + 1 if body else 0

    tally = await flood(arena.port, 2, arena.settings.seconds, 10_000, lambda _: request, measured)
    keys = arena.bounds.progress_keys
    return Outcome(
        tally,
        [
            row(
                "CSV columns",
                shape["columns"],
                "columns",
                f"<= {keys + 3} (--max-progress-keys + 3)",
                f"one answer {shape['bytes'] / MiB:.1f} MiB; metric history of "
                f"{arena.progress_sent:,} reports sent",
            ),
        ],
    )


async def api_token_guesses(arena: Arena) -> Outcome:
    """(d) Well-formed random API tokens, from eight lanes."""
    host = f"127.0.0.1:{arena.port}"

    def guess(_: int) -> bytes:
        headers = {"Authorization": f"Bearer {new_api_token()}"}
        return build_request("GET", "/api/queue/stats", host, None, headers)

    return _guess_outcome(
        arena, await flood(arena.port, 8, arena.settings.seconds, 1_000_000, guess)
    )


async def worker_token_guesses(arena: Arena) -> Outcome:
    """(e) Well-formed random worker tokens on the heartbeat, from eight lanes."""
    host = f"127.0.0.1:{arena.port}"
    body = {"worker_id": "w_guess", "status": "idle"}

    def guess(_: int) -> bytes:
        headers = {"X-Worker-Token": new_worker_token()}
        return build_request("POST", "/api/workers/heartbeat", host, body, headers)

    return _guess_outcome(
        arena, await flood(arena.port, 8, arena.settings.seconds, 1_000_000, guess)
    )


def _guess_outcome(arena: Arena, tally: Tally) -> Outcome:
    bounds = arena.bounds
    return Outcome(
        tally,
        [
            row(
                "failed sign-ins answered 401",
                tally.statuses.get("401", 0),
                "answers",
                f"<= {bounds.failures_allowed(arena.settings.seconds)} "
                f"({bounds.auth_failures_per_window} per {bounds.auth_failure_window_s:g} s "
                "window), then 429",
                "each 401 is an audit row and a JSONL line",
            )
        ],
        disk_target_mib=REFUSALS_DISK_TARGET_MIB,
        disk_target_note="the audit of one window's failures, then only 429s",
    )


async def trickling_connections(arena: Arena) -> Outcome:
    """(f) Connections that send a request's headers one byte a second."""
    counts = await trickle(arena.port, arena.settings.connections, arena.settings.seconds)
    limit = arena.bounds.connections_per_address
    timeout = arena.bounds.request_header_timeout_s
    tally = Tally(requests=counts.opened)
    tally.statuses.update(
        {
            "opened": counts.opened,
            "closed by server": counts.closed_by_server,
            "connect failed": counts.refused,
        }
    )
    return Outcome(
        tally,
        [
            row(
                "attacker connections open near the end",
                counts.open_near_end,
                "connections",
                f"<= {limit} (--max-connections-per-address)",
                f"{arena.settings.connections:,} slots, each reopened when closed or refused",
            ),
            row(
                "longest a trickling connection lived",
                round(counts.longest_s, 1),
                "s",
                f"<= {timeout + 1:g} (--request-header-timeout {timeout:g} s, + 1 s)",
                f"{counts.closed_by_server:,} closed by the server, "
                f"{counts.refused:,} connects failed or timed out",
            ),
        ],
        note="connections opened per second",
        disk_target_mib=REFUSALS_DISK_TARGET_MIB,
        disk_target_note="a refused connection logs a line, not a traceback",
    )


# (letter, name, attack, what to prepare unmeasured): the order they run in, on one
# orchestrator.
ATTACKS: tuple[tuple[str, str, Attack, Prepare | None], ...] = (
    ("a", "log flood", log_flood, None),
    ("b", "progress flood", progress_flood, None),
    ("c", "metrics CSV loop", metrics_csv_loop, seed_metric_history),
    ("d", "API-token guesses", api_token_guesses, None),
    ("e", "worker-token guesses", worker_token_guesses, None),
    ("f", "trickling connections", trickling_connections, None),
)
