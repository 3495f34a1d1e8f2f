"""Preemption (issue 25), against a real orchestrator process, a real ``tunefleet worker``
and the example trainer on loopback: a running job is preempted through the API, again
and again, and each time

- the time from the preempt request to the attempt's end (``preempted``: the trainer
  checkpointed on SIGTERM, the agent stored the checkpoint and reported);
- the time from the request to the next attempt's acknowledgement (requeued at the head
  of its band, dispatched, the agent's first report), and to its first training step
  (the checkpoint restored, the trainer started and resumed);
- the steps lost: the last step the preempted attempt reported, less the step the next
  one resumed after (0 when the trainer saves on SIGTERM; at most one
  ``checkpointing_steps`` interval otherwise).

Times are the orchestrator's own timestamps (milliseconds). Bounded: a few preemptions
of one job, then it is cancelled.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import Row, row
from bench.fleet_common import machine_note, pick
from bench.orchestrator_proc import Orchestrator
from bench.simulated_worker import api

SAMPLES: int = pick(5, 2)
INTERVAL = 100  # checkpointing_steps
CONFIG = {
    "tunefleet_command": ["python", "-m", "tunefleet.examples.tiny_trainer"],
    "max_train_steps": 1_000_000,
    "step_seconds": 0.01,
    "checkpointing_steps": INTERVAL,
    "output_dir": "output",
}


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="tf-bench-preemption-") as scratch:
        base = Path(scratch)
        orch = Orchestrator(base / "data").start()
        created = api(orch, "POST", "/api/admin/workers", {"name": "bench-gpu", "labels": {}})
        env = {
            **os.environ,
            "SIMPLETUNER_ORCHESTRATOR_URL": f"http://127.0.0.1:{orch.port}",
            "SIMPLETUNER_WORKER_TOKEN": created["token"],
            "SIMPLETUNER_WORKER_PERSISTENT": "true",
        }
        log = (base / "agent.log").open("wb")
        agent = subprocess.Popen(
            [sys.executable, "-m", "tunefleet", "worker", "--work-dir", str(base / "work")],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            samples = _measure(orch)
        finally:
            agent.terminate()
            try:
                agent.wait(timeout=30)
            except subprocess.TimeoutExpired:
                agent.kill()
            log.close()
            orch.stop()
    ended = [s["ended_ms"] for s in samples]
    acked = [s["acked_ms"] for s in samples]
    first = [s["first_step_s"] for s in samples]
    lost = [s["steps_lost"] for s in samples]
    note = f"{len(samples)} preemptions of one job, tiny trainer, 10 ms steps; {machine_note()}"
    return [
        row("preempt request to attempt ended preempted (median)", statistics.median(ended),
            "ms", None, f"{note}; all: {', '.join(f'{v:.0f}' for v in ended)}"),
        row("preempt request to next attempt acknowledged (median)", statistics.median(acked),
            "ms", None, f"requeue, dispatch, the agent's first report; all: "
            f"{', '.join(f'{v:.0f}' for v in acked)}"),
        row("preempt request to next attempt's first step (median)", statistics.median(first),
            "s", None, f"+ checkpoint restore, trainer start; all: "
            f"{', '.join(f'{v:.2f}' for v in first)}"),
        row("steps lost per preemption (max)", max(lost), "steps", f"<= {INTERVAL}",
            f"checkpointing_steps {INTERVAL}; all: {lost}"),
    ]  # fmt: skip


def _measure(orch: Orchestrator) -> list[dict[str, float]]:
    job_id = api(orch, "POST", "/api/queue/submit", {"config": CONFIG, "target": "worker"})[
        "job_id"
    ]
    samples = []
    for number in range(1, SAMPLES + 1):
        _wait(lambda n=number: _running_past(orch, job_id, n), f"attempt {number} to train")
        asked = time.time()
        api(orch, "POST", f"/api/jobs/{job_id}/preempt", {"reason": "bench"})
        job = _wait(lambda n=number: _attempt(orch, job_id, n + 1, "started_at"), "a restart")
        preempted = job["attempt_history"][number - 1]
        points = api(orch, "GET", f"/api/queue/{job_id}/metrics")["points"]
        stopped = max((p["step"] for p in points if p["attempt"] == number), default=0)
        first = _wait(
            lambda n=number: min(
                ((p["step"], p["at"]) for p in _points(orch, job_id) if p["attempt"] == n + 1),
                default=None,
            ),
            "the next attempt's first step",
        )
        resumed, first_at = first
        samples.append(
            {
                "ended_ms": (_seconds(preempted["ended_at"]) - asked) * 1000,
                "acked_ms": (_seconds(job["attempt_history"][number]["started_at"]) - asked) * 1000,
                "first_step_s": _seconds(first_at) - asked,
                "steps_lost": max(0, stopped - (resumed - 1)),
            }
        )
    api(orch, "POST", f"/api/queue/{job_id}/cancel", {})
    return samples


def _points(orch: Orchestrator, job_id: str) -> list[dict[str, Any]]:
    return api(orch, "GET", f"/api/queue/{job_id}/metrics")["points"]


def _running_past(orch: Orchestrator, job_id: str, attempt: int) -> bool | None:
    """Whether the attempt has trained past its first checkpoint interval."""
    steps = [p["step"] for p in _points(orch, job_id) if p["attempt"] == attempt]
    return True if steps and max(steps) - min(steps) > INTERVAL * 1.5 else None


def _attempt(orch: Orchestrator, job_id: str, number: int, key: str) -> dict[str, Any] | None:
    job = api(orch, "GET", f"/api/queue/{job_id}")
    history = job["attempt_history"]
    return job if len(history) >= number and history[number - 1].get(key) else None


def _wait(probe: Any, what: str, timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value is not None:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
