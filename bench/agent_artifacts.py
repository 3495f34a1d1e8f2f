"""The agent's side of artifacts (issue 12), against a real orchestrator process on
loopback and its embedded store:

- the agent's RSS growth while it uploads a 2 GiB file (its own upload code, multipart,
  streamed from disk, sha256 as it reads), in a process of its own so the RSS is the
  uploader's alone; and that upload's throughput;
- a retried job's time from dispatch to its trainer starting, when the agent must first
  download and check a 1 GiB checkpoint: a simulated first worker takes the job, stores
  checkpoint-100 (1 GiB) and disconnects; a real ephemeral ``tunefleet worker`` takes the
  retry. Dispatch and start are the orchestrator's own timestamps of that attempt
  (``dispatched_at``; ``started_at`` = the agent's ``running`` report, sent when the
  trainer's process runs). A fresh job (nothing to restore) gives the baseline.

Bounded: one upload, three resumes (one with TUNEFLEET_BENCH_QUICK), files deleted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import Row, row
from bench.fleet_common import machine_note, pick
from bench.orchestrator_proc import Orchestrator
from bench.simulated_worker import api, first_worker_takes

ROOT = Path(__file__).resolve().parents[1]
UPLOAD_BYTES: int = pick(2 * 1024**3, 256 * 1024**2)
CHECKPOINT_BYTES: int = pick(1024**3, 128 * 1024**2)
RESUMES: int = pick(3, 1)
TRAINER_CONFIG = {
    "tunefleet_command": ["python", "-m", "tunefleet.examples.tiny_trainer"],
    "max_train_steps": 1_000_000,
    "step_seconds": 0.01,
    "output_dir": "output",
}


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="tf-bench-agent-artifacts-") as scratch:
        base = Path(scratch)
        # Simulated workers send no heartbeats: none may be declared lost mid-run.
        orch = Orchestrator(base / "data", heartbeat_timeout_s=900).start()
        try:
            upload = _measure_upload(orch, base)
            ckpt = _checkpoint_files(base / "ckpt")
            resumes = [_measure_dispatch_to_start(orch, base, n, ckpt) for n in range(RESUMES)]
            fresh = _measure_dispatch_to_start(orch, base, RESUMES, None)
        finally:
            orch.stop()
    size = f"{UPLOAD_BYTES / 1024**3:g} GiB"
    gib = f"{CHECKPOINT_BYTES / 1024**3:g} GiB"
    median = sorted(resumes)[len(resumes) // 2]
    return [
        row("agent RSS growth while uploading", upload["rss_growth_mib"], "MiB", "<= 64",
            f"{size} file, multipart, to a real orchestrator; peak over before"),
        row("agent upload throughput", upload["mb_per_s"], "MB/s", None,
            f"{size}, sha256 as it reads, until stored (fsync included); {machine_note()}"),
        row(f"retried job, {gib} checkpoint: dispatch to trainer start", median, "s", None,
            f"median of {len(resumes)}: {', '.join(f'{v:.2f}' for v in resumes)}; "
            "download + sha256 + config + spawn"),
        row("fresh job: dispatch to trainer start", fresh, "s", None,
            "the same job with nothing to restore, for comparison"),
    ]  # fmt: skip


def _checkpoint_files(directory: Path) -> Path:
    """checkpoint-100/ of the tiny trainer, made 1 GiB by its padding.bin."""
    ckpt = directory / "checkpoint-100"
    ckpt.mkdir(parents=True)
    block = random.Random(7).randbytes(1024 * 1024)
    with (ckpt / "padding.bin").open("wb") as handle:
        for _ in range(CHECKPOINT_BYTES // len(block)):
            handle.write(block)
    state = {"step": 100, "weights": {"weight": 1.0, "bias": 0.0}, "loss": 1.0, "job_id": None}
    (ckpt / "state.json").write_text(json.dumps(state))
    return ckpt


async def _store_checkpoint(event: dict[str, Any], ckpt: Path) -> None:
    from tunefleet.agent.uploads import ArtifactClient

    client = ArtifactClient(event["upload_endpoint"], event["upload_token"])
    try:
        files = []
        for path in sorted(await asyncio.to_thread(lambda: list(ckpt.iterdir()))):
            stored = await client.put_file(f"checkpoint-100/{path.name}", path)
            files.append({"key": stored.key, "size": stored.size, "sha256": stored.sha256})
        manifest = {"checkpoint": "checkpoint-100", "step": 100, "files": files}
        await client.put_bytes(
            "checkpoint-100/.tunefleet-manifest.json", json.dumps(manifest).encode()
        )
    finally:
        await client.close()


# --- measurements -------------------------------------------------------------------------


def _measure_upload(orch: Orchestrator, base: Path) -> dict[str, Any]:
    event = first_worker_takes(orch, "bench-uploader", {"x": 1})
    source = base / "upload.bin"
    block = os.urandom(1024 * 1024)
    with source.open("wb") as handle:
        for _ in range(UPLOAD_BYTES // len(block)):
            handle.write(block)
    env = {**os.environ, "BENCH_ENDPOINT": event["upload_endpoint"],
           "BENCH_TOKEN": event["upload_token"], "BENCH_FILE": str(source)}  # fmt: skip
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench.agent_artifacts"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
    finally:
        source.unlink(missing_ok=True)
    finished = {"status": "completed", "attempt": event["attempt"]}
    api(orch, "POST", f"/api/workers/job/{event['job_id']}/status", finished, event["worker_token"])
    if done.returncode != 0:
        raise RuntimeError(f"the uploader failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _measure_dispatch_to_start(orch: Orchestrator, base: Path, n: int, ckpt: Path | None) -> float:
    event = first_worker_takes(orch, f"bench-first-{n}", TRAINER_CONFIG)
    job_id, first_token = event["job_id"], event["worker_token"]
    if ckpt is not None:
        asyncio.run(_store_checkpoint(event, ckpt))
    # The first worker goes away mid-run: the job is queued again, for the real agent.
    gone = {"worker_id": event["worker_id"], "reason": "bench: the spot instance was reclaimed"}
    api(orch, "POST", "/api/workers/disconnect", gone, first_token)
    # Ephemeral (the admin's worker_type rules the agent): it exits once its job is reported.
    worker = {"name": f"bench-agent-{n}", "worker_type": "ephemeral"}
    created = api(orch, "POST", "/api/admin/workers", worker)
    work = base / f"agent-{n}"
    env = {**os.environ, "SIMPLETUNER_ORCHESTRATOR_URL": f"http://127.0.0.1:{orch.port}",
           "SIMPLETUNER_WORKER_TOKEN": created["token"]}  # fmt: skip
    log = (base / f"agent-{n}.log").open("wb")
    agent = subprocess.Popen(
        [sys.executable, "-m", "tunefleet", "worker", "--work-dir", str(work)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log_path = base / f"agent-{n}.log"
    try:
        started = _wait_trainer_started(log_path, timeout_s=300)
        api(orch, "POST", f"/api/queue/{job_id}/cancel", {})
        agent.wait(timeout=60)  # ephemeral: gone once its job is reported
    finally:
        if agent.poll() is None:
            agent.kill()
        log.close()
        restored = "restored checkpoint-100" in _read(work / "jobs" / job_id, "output.log")
        subprocess.run(["rm", "-rf", str(work)], check=False)
    if ckpt is not None and not restored:
        raise RuntimeError(
            f"the retry did not restore checkpoint-100: {_read(base, log_path.name)}"
        )
    job = api(orch, "GET", f"/api/queue/{job_id}")
    dispatched = [a["dispatched_at"] for a in job["attempt_history"] if a["number"] >= 2]
    return started - _seconds(dispatched[-1])


def _wait_trainer_started(log_path: Path, timeout_s: float) -> float:
    """When the agent started the trainer's process: its "job started" log line's time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in _read(log_path.parent, log_path.name).splitlines():
            if "job started" in line and "[tunefleet.agent.executor]" in line:
                return _seconds(line.split()[0])
        time.sleep(0.2)
    raise RuntimeError(f"the retried job's trainer did not start within {timeout_s:g} s")


def _read(directory: Path, name: str) -> str:
    found = list(directory.rglob(name)) if directory.exists() else []
    return "\n".join(p.read_text(errors="replace") for p in found)


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


# --- the uploader process -----------------------------------------------------------------


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def _upload(endpoint: str, token: str, source: Path) -> dict[str, Any]:
    from tunefleet.agent.uploads import ArtifactClient

    client = ArtifactClient(endpoint, token)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.wait(0.02):
            peak = max(peak, _rss_bytes())

    before = _rss_bytes()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    try:
        stored = await client.put_file("bench/upload.bin", source)
    finally:
        elapsed = time.perf_counter() - started
        stop.set()
        sampler.join()
        await client.close()
    assert len(stored.sha256) == len(hashlib.sha256().hexdigest())
    return {
        "rss_growth_mib": round(max(0, peak - before) / 1024**2, 1),
        "mb_per_s": round(stored.size / elapsed / 1e6, 1),
    }


if __name__ == "__main__":
    result = asyncio.run(
        _upload(
            os.environ["BENCH_ENDPOINT"], os.environ["BENCH_TOKEN"], Path(os.environ["BENCH_FILE"])
        )
    )
    print(json.dumps(result))
