"""Workers that are gone: are jobs dispatched to workers whose streams have closed?

500 workers connect and each runs a job; then all their streams close at once without a
word (machines that died, a load balancer that dropped them); 50 fresh workers connect;
500 jobs are submitted. A job sent to a departed worker waits for an acknowledgement
that cannot come (60 s by default) unless the orchestrator notices the closed stream;
so this counts such jobs and reports the rate and the slowest job. Bounded: 120 s of
jobs at most (twice the acknowledgement timeout), the workers never more than 550.
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

DEPARTING: int = pick(500, 100)
FRESH: int = pick(50, 10)
JOBS: int = pick(500, 100)
LIMIT_S = 120.0


def run() -> list[Row]:
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for backend in backends():
        with session(backend, "departed") as s:
            s.fleet(DEPARTING)
            s.call("set_mode", on_job="complete")
            reply = s.call(
                "departed",
                timeout_s=LIMIT_S * 3,
                departing=DEPARTING,
                fresh=FRESH,
                jobs=JOBS,
                limit_s=LIMIT_S,
            )
            s.call("close_streams")
        result = reply["result"]
        raw[backend] = dict(result) | {"cpu": {k: v for k, v in reply.items() if k != "result"}}
        note = (
            f"{DEPARTING} departed, {FRESH} fresh workers, {JOBS} jobs; {cpu_note(reply)}; "
            f"{machine_note()}"
        )
        rows += [
            row(
                f"{backend} jobs sent to departed workers",
                result["sent_to_departed"],
                "jobs",
                "0",
                note,
            ),
            row(f"{backend} jobs/s", round(result["rate"], 1), "jobs/s", None, note),
            row(
                f"{backend} unfinished after {LIMIT_S:g} s",
                result["unfinished"],
                "jobs",
                "0",
                "",
            ),
            *latency_rows(
                f"{backend} job",
                result["job_ms"],
                {"max": "< 5,000 ms (never the 60 s acknowledgement timeout)"},
                "submit → completed",
                ("p50", "max"),
            ),
        ]
    save_raw("departed_workers", raw)
    return rows
