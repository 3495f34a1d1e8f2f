"""The agent's side of artifacts (issue 12): its memory while it uploads a 2 GiB file, and
how long a retried job takes from dispatch to its trainer starting when it must first
download a 1 GiB checkpoint.

Each measured run is its own process (its RSS is the agent's alone), talking to the
contract's store (tests/fakes/artifact_store.py) in another process on loopback:
the numbers are the agent's, not the orchestrator's (``artifacts_store`` times those).
"Dispatch" is the executor receiving the job (what the agent does on ``job_submit``);
"trainer started" is the trainer's process running (the executor's JobStarted).
Bounded: one 2 GiB upload, three resumes, files deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import Row, row
from bench.fleet_common import pick

ROOT = Path(__file__).resolve().parents[1]
UPLOAD_BYTES: int = pick(2 * 1024**3, 256 * 1024**2)
CHECKPOINT_BYTES: int = pick(1024**3, 128 * 1024**2)
RESUMES = 3
TOKEN = "ut_fake-upload-token-0123456789"


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="tf-bench-artifacts-") as scratch:
        base = Path(scratch)
        with _store(base / "store") as (endpoint, store_root):
            upload = _measure_upload(base, endpoint)
            resume = _measure_resume(base, endpoint, store_root)
    size_note = f"{UPLOAD_BYTES / 1024**3:g} GiB file"
    rows = [
        row(
            "agent RSS growth while uploading",
            upload["rss_growth_mib"],
            "MiB",
            "<= 64 MiB",
            f"{size_note}, multipart, streamed from disk; peak minus before",
        ),
        row(
            "agent upload throughput",
            upload["mb_per_s"],
            "MB/s",
            None,
            f"{size_note} to the fake store on loopback, sha256 included",
        ),
    ]
    ckpt = f"{CHECKPOINT_BYTES / 1024**3:g} GiB checkpoint"
    median = sorted(resume["with_checkpoint_s"])[len(resume["with_checkpoint_s"]) // 2]
    rows.append(
        row(
            "retried job: dispatch to trainer start",
            median,
            "s",
            None,
            f"median of {RESUMES}, {ckpt} downloaded and checked; "
            f"all: {', '.join(f'{v:.2f}' for v in resume['with_checkpoint_s'])}",
        )
    )
    rows.append(
        row(
            "fresh job: dispatch to trainer start",
            resume["fresh_s"],
            "s",
            None,
            "the same job with nothing to restore, for comparison",
        )
    )
    return rows


# --- the store ----------------------------------------------------------------------------


@contextlib.contextmanager
def _store(root: Path) -> Iterator[tuple[str, Path]]:
    root.mkdir(parents=True)
    port = _free_port()
    code = (
        "import asyncio, sys; from aiohttp import web; "
        "from tests.fakes.artifact_store import FakeStore; "
        "store = FakeStore(__import__('pathlib').Path(sys.argv[1]), part_size=64 * 1024**2); "
        "web.run_app(store.app(), host='127.0.0.1', port=int(sys.argv[2]), print=None)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(root), str(port)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/api/artifacts", root
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _write_file(path: Path, size: int) -> None:
    block = random.Random(7).randbytes(1024 * 1024)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        left = size
        while left > 0:
            handle.write(block[: min(left, len(block))])
            left -= len(block)


# --- the measured processes ---------------------------------------------------------------


def _child(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.agent_artifacts", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench child {args[0]} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _measure_upload(base: Path, endpoint: str) -> dict[str, Any]:
    source = base / "upload.bin"
    _write_file(source, UPLOAD_BYTES)
    try:
        return _child("upload", endpoint, str(source))
    finally:
        source.unlink(missing_ok=True)
        shutil.rmtree(base / "store" / "objects", ignore_errors=True)


def _measure_resume(base: Path, endpoint: str, store_root: Path) -> dict[str, Any]:
    # A stored checkpoint-100 of the tiny trainer, with a padding.bin that makes it big.
    ckpt = store_root / "objects" / "checkpoint-100"
    _write_file(ckpt / "padding.bin", CHECKPOINT_BYTES)
    state = {"step": 100, "weights": {"weight": 1.0, "bias": 0.0}, "loss": 1.0, "job_id": "j_b"}
    (ckpt / "state.json").write_text(json.dumps(state))
    files = [
        {"key": f"checkpoint-100/{p.name}", "size": p.stat().st_size, "sha256": _sha(p)}
        for p in sorted(ckpt.iterdir())
    ]
    manifest = {"checkpoint": "checkpoint-100", "step": 100, "files": files}
    (ckpt / ".tunefleet-manifest.json").write_text(json.dumps(manifest))
    timings = [
        _child("resume", endpoint, str(base / f"work-{n}"), "checkpoint-100")["start_s"]
        for n in range(RESUMES)
    ]
    fresh = _child("resume", endpoint, str(base / "work-fresh"), "")["start_s"]
    return {"with_checkpoint_s": timings, "fresh_s": fresh}


def _sha(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def _upload(endpoint: str, source: str) -> dict[str, Any]:
    from tunefleet.agent.uploads import ArtifactClient

    client = ArtifactClient(endpoint, TOKEN)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _rss_bytes())
            time.sleep(0.02)

    before = _rss_bytes()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    try:
        stored = await client.put_file("bench/upload.bin", Path(source))
    finally:
        elapsed = time.perf_counter() - started
        stop.set()
        sampler.join()
        await client.close()
    return {
        "rss_growth_mib": round((peak - before) / 1024**2, 1),
        "mb_per_s": round(stored.size / elapsed / 1e6, 1),
    }


async def _resume(endpoint: str, work_dir: str, checkpoint: str) -> dict[str, Any]:
    from tunefleet.agent.executor import JobExecutor, JobStarted
    from tunefleet.agent.job_events import ArtifactPlan, ExecutorEvent, JobSpec

    executor = JobExecutor(work_dir, [sys.executable, "-m", "tunefleet.examples.tiny_trainer"])
    started_at: list[float] = []

    async def on_event(event: ExecutorEvent) -> None:
        if isinstance(event, JobStarted) and not started_at:
            started_at.append(time.perf_counter())
            await executor.cancel("bench: the trainer started, that is all we time")

    spec = JobSpec(
        job_id="j_b",
        attempt=2,
        config={"max_train_steps": 1_000_000, "step_seconds": 0.01},
        artifacts=ArtifactPlan(endpoint, TOKEN, checkpoint or None),
    )
    dispatched = time.perf_counter()
    await executor.run(spec, on_event)
    shutil.rmtree(work_dir, ignore_errors=True)
    return {"start_s": round(started_at[0] - dispatched, 3)}


def _main(argv: list[str]) -> None:
    if argv[0] == "upload":
        result = asyncio.run(_upload(argv[1], argv[2]))
    else:
        result = asyncio.run(_resume(argv[1], argv[2], argv[3]))
    print(json.dumps(result))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    _main(sys.argv[1:])
