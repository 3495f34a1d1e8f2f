"""Failure detection: from a worker's last heartbeat to its job being requeued, and from
that requeue to the job's redispatch to another worker.

A worker takes a job, acknowledges it and falls silent with its stream still open (a
hung machine, not a closed socket). Both instants come from the orchestrator itself:
the worker's ``last_heartbeat`` and the job timeline's ``requeued`` entry (millisecond
timestamps); the redispatch is the ``job_submit`` arriving at the next worker. The
heartbeat timeout is short here (2 s) so samples are quick; the detection delay past
the timeout does not depend on it.
"""

from __future__ import annotations

from typing import Any

from bench import Row
from bench.fleet_common import (
    backends,
    cpu_note,
    latency_rows,
    machine_note,
    pick,
    save_raw,
    session,
)
from bench.plots import cdf

HEARTBEAT_TIMEOUT_S = 2.0
HEARTBEAT_INTERVAL_S = 0.5
SAMPLES: int = pick(10, 3)


def run() -> list[Row]:
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    for backend in backends():
        with session(backend, "failure", heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S) as s:
            s.fleet(2 * SAMPLES + 2)
            s.call("set_mode", on_job="ack")
            s.call("background_heartbeats", interval_s=HEARTBEAT_INTERVAL_S)
            reply = s.call("failure", samples=SAMPLES, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S)
            s.call("background_heartbeats", interval_s=0)
            s.call("close_streams")
        result = reply["result"]
        raw[backend] = {k: v for k, v in result.items()} | {
            "cpu": {k: v for k, v in reply.items() if k != "result"}
        }
        note = (
            f"{SAMPLES} samples, timeout {HEARTBEAT_TIMEOUT_S:g} s, others beat every "
            f"{HEARTBEAT_INTERVAL_S:g} s; {cpu_note(reply)}; {machine_note()}"
        )
        keys = ("p50", "max")
        rows += latency_rows(
            f"{backend} requeue after timeout expiry",
            result["after_expiry_ms"],
            {"max": "<= 1,000 ms"},
            note,
            keys,
        )
        rows += latency_rows(
            f"{backend} last heartbeat → requeue",
            result["last_heartbeat_to_requeue_ms"],
            {},
            "timeout + detection",
            keys,
        )
        rows += latency_rows(
            f"{backend} requeue → redispatch",
            result["requeue_to_redispatch_ms"],
            {},
            "to job_submit arriving at the next worker",
            keys,
        )
    save_raw("failure_detection", raw)
    cdf(
        "failure_detection-cdf",
        "Failure detection: delay past the heartbeat timeout, and redispatch",
        {
            f"{backend} {label}": value[key]
            for backend, value in raw.items()
            for label, key in (
                ("past expiry", "after_expiry_ms"),
                ("requeue→redispatch", "requeue_to_redispatch_ms"),
            )
        },
        log_x=False,
    )
    return rows
