"""Artifact upload: one 2 GiB PUT to the embedded store of a real orchestrator process on
loopback, as a trainer stores its model (``PUT {upload_endpoint}/{bucket}/{key}`` with the
job's upload token). Throughput counts until the orchestrator answered, so the fsync and
the rename are in it; the orchestrator's RSS is sampled every 20 ms during the upload.

Targets (issue 12): >= 300 MB/s, RSS growth <= 64 MiB. The client runs on the same
machine and takes a share of the CPUs, which the note says.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from bench import Row, row
from bench.fleet_common import machine_note, pick
from bench.orchestrator_proc import Orchestrator, proc_cpu_s, proc_rss_bytes
from bench.simulated_worker import first_worker_takes

SIZE: int = pick(2 * 1024**3, 256 * 1024**2)
RUNS: int = pick(3, 1)
BLOCK = 4 * 1024 * 1024
MB = 1_000_000


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="tunefleet-bench-artifacts-") as tmp:
        orch = Orchestrator(Path(tmp) / "data").start()
        try:
            event = first_worker_takes(orch, "bench-uploader", {"x": 1})
            results = [asyncio.run(_upload_once(orch, event, n)) for n in range(RUNS)]
        finally:
            orch.stop()
    best = max(r["mb_s"] for r in results)
    rates = ", ".join(f"{r['mb_s']:.0f}" for r in results)
    growth = max(r["rss_growth"] for r in results)
    server_cpu = max(r["server_cpu_share"] for r in results)
    note = f"{SIZE / 1024**3:g} GiB x {RUNS}: {rates} MB/s; {machine_note()}"
    return [
        row(f"{SIZE / 1024**3:g} GiB PUT to the embedded store", best, "MB/s", ">= 300", note),
        row(
            "orchestrator RSS growth during it",
            growth / 1024**2,
            "MiB",
            "<= 64",
            f"peak over the RSS before the upload; server {server_cpu:.0%} of a CPU",
        ),
    ]


async def _body() -> AsyncIterator[bytes]:
    block = os.urandom(BLOCK)
    sent = 0
    while sent < SIZE:
        piece = block[: min(BLOCK, SIZE - sent)]
        sent += len(piece)
        yield piece


async def _upload_once(orch: Orchestrator, event: dict[str, Any], n: int) -> dict[str, float]:
    pid = orch.pid
    baseline = proc_rss_bytes(pid)
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], proc_rss_bytes(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    url = f"{event['upload_endpoint']}/bench/model-{n}.safetensors"
    headers = {"X-Upload-Token": event["upload_token"], "Content-Length": str(SIZE)}
    cpu_before, started = proc_cpu_s(pid), time.perf_counter()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.put(url, data=_body(), headers=headers) as resp,
        ):
            answer = await resp.json()
            if resp.status != 200 or answer.get("size") != SIZE:
                raise RuntimeError(f"upload answered {resp.status}: {answer}")
    finally:
        elapsed = time.perf_counter() - started
        done.set()
        sampler.join()
    cpu = proc_cpu_s(pid) - cpu_before
    return {
        "mb_s": SIZE / MB / elapsed,
        "rss_growth": float(max(0, peak[0] - baseline)),
        "server_cpu_share": cpu / elapsed,
    }
