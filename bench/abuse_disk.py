"""(g) of `bench abuse`: a full disk. An orchestrator of its own runs with its data
directory on a small tmpfs (root only; otherwise the attack is skipped and the reason
printed). A worker fills the disk, with one artifact as large as the filesystem (refused
before its first byte: it cannot fit above the floor) and then log batches until they
are refused; then the control plane is tried on the full disk: a heartbeat, a submit, a
log post, an artifact download and an API GET.

The floor (--min-free-disk) is set above what a few requests need, so once it is in
force the fill stops there with 507 and the rest keeps working (small writes that still
fit are taken); before it, the disk filled to the last byte and the orchestrator
answered 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import subprocess
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp

from bench import Row, row
from bench.abuse_attacks import (
    LOG_LINE,
    LOG_LINES_PER_BATCH,
    RSS_TARGET_MIB,
    Bounds,
    MiB,
    log_batch,
)
from bench.abuse_client import Lane, answers
from bench.loadgen_http import build_request
from bench.orchestrator_proc import ADMIN_TOKEN, Orchestrator
from bench.simulated_worker import first_worker_takes

TMPFS_BYTES = 96 * MiB
FREE_FLOOR = 16 * MiB  # --min-free-disk on the small disk
PROBES_EACH = 5
ARTIFACT_KEY = "kept.bin"  # uploaded as <bucket>/kept.bin; the job lists it as kept.bin
_BLOCK = 1024 * 1024


def dir_bytes(path: Path) -> int:
    """Bytes allocated to the files under ``path`` (files vanishing meanwhile skipped)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


@contextlib.contextmanager
def small_filesystem(path: Path, size: int) -> Iterator[str | None]:
    """A tmpfs of ``size`` bytes mounted at ``path``: yields None, or why there is none."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        yield "mounting a tmpfs needs root"
        return
    if shutil.which("mount") is None:
        yield "no mount command"
        return
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]
    done = subprocess.run(mount, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        yield f"mount -t tmpfs failed: {done.stderr.strip() or done.returncode}"
        return
    try:
        yield None
    finally:
        if subprocess.run(["umount", str(path)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False)


def disk_full(work: Path, bounds: Bounds) -> list[Row]:
    prefix = "g disk full"
    mount = work / "small-disk"
    with small_filesystem(mount, TMPFS_BYTES) as why_not:
        if why_not is not None:
            print(f"{prefix}: skipped: {why_not}")
            return [row(f"{prefix}: skipped", 0, "", None, why_not)]
        # The log quota out of the way: the disk floor is what must stop the fill.
        small = dataclasses.replace(
            bounds, min_free_disk=str(FREE_FLOOR), log_bytes_per_attempt=2**40
        )
        server = Orchestrator(mount / "data", extra_args=small.server_args())
        server.start()
        try:
            job = first_worker_takes(server, "bench-disk-filler", {"max_train_steps": 1})
            _put(job, f"bench/{ARTIFACT_KEY}", os.urandom(256 * 1024))
            disk0, rss0 = dir_bytes(server.data_dir), server.rss_bytes()
            found = asyncio.run(_fill_and_try(server, job))
            found["disk_growth"] = dir_bytes(server.data_dir) - disk0
            found["rss_growth"] = server.rss_bytes() - rss0
            found["free"] = shutil.disk_usage(mount).free
        except Exception:
            print(f"{prefix} server log tail:\n{server.log_tail()}")
            raise
        finally:
            server.stop()
    return _rows(prefix, found)


def _put(job: dict[str, Any], key: str, data: bytes) -> None:
    request = urllib.request.Request(
        f"{job['upload_endpoint']}/{key}",
        data=data,
        method="PUT",
        headers={"X-Upload-Token": job["upload_token"]},
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        resp.read()


async def _fill_and_try(server: Orchestrator, job: dict[str, Any]) -> dict[str, Any]:
    # Refused before its first byte: its declared size cannot fit above the floor.
    found: dict[str, Any] = {"artifact": await _fill_with_artifact(job)}
    lane = Lane(server.port)
    host = f"127.0.0.1:{server.port}"
    worker = {"X-Worker-Token": job["worker_token"]}
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    seq = [0]

    def log_post(lines: int) -> bytes:
        body = log_batch(job["attempt"], seq[0], lines)
        seq[0] += lines
        path = f"/api/workers/job/{job['job_id']}/logs"
        return build_request("POST", path, host, body, worker)

    logs: Counter[str] = Counter()
    refused = 0
    for _ in range(TMPFS_BYTES // (LOG_LINES_PER_BATCH * len(LOG_LINE)) + 4):
        status, _ = await lane.send(log_post(LOG_LINES_PER_BATCH))
        logs[status] += 1
        refused += status != "200"
        if refused >= 3:
            break
    found["logs"] = logs
    tries = {
        "heartbeat": lambda: build_request(
            "POST",
            "/api/workers/heartbeat",
            host,
            {"worker_id": job["worker_id"], "status": "busy", "current_job_id": job["job_id"]},
            worker,
        ),
        "submit": lambda: build_request(
            "POST",
            "/api/queue/submit",
            host,
            {"config": {"max_train_steps": 1}, "target": "worker"},
            admin,
        ),
        "log post": lambda: log_post(1),
        "artifact download": lambda: build_request(
            "GET", f"/api/queue/{job['job_id']}/artifacts/{ARTIFACT_KEY}", host, None, admin
        ),
        "API GET": lambda: build_request("GET", "/api/queue/stats", host, None, admin),
    }
    answers: dict[str, Counter[str]] = {}
    for kind, request in tries.items():
        answers[kind] = Counter()
        for _ in range(PROBES_EACH):
            status, _ = await lane.send(request())
            answers[kind][status] += 1
    lane.close()
    found["tries"] = answers
    return found


async def _fill_with_artifact(job: dict[str, Any]) -> str:
    """PUT one artifact as large as the whole filesystem; its answer (or error)."""

    async def body() -> AsyncIterator[bytes]:
        block = os.urandom(_BLOCK)
        for _ in range(TMPFS_BYTES // _BLOCK):
            yield block

    url = f"{job['upload_endpoint']}/bench/fill.bin"
    headers = {"X-Upload-Token": job["upload_token"], "Content-Length": str(TMPFS_BYTES)}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
            session.put(url, data=body(), headers=headers) as resp,
        ):
            await resp.read()
            return str(resp.status)
    except (aiohttp.ClientError, OSError, TimeoutError) as error:
        return type(error).__name__


def _rows(prefix: str, found: dict[str, Any]) -> list[Row]:
    logs = answers(found["logs"])
    # A write is let through only if it fits above the floor (what SQLite's WAL will
    # copy into the database counted as used): the fill stops at the floor, not under it.
    rows = [
        row(
            f"{prefix}: free space left",
            round(found["free"] / MiB, 1),
            "MiB",
            f">= {FREE_FLOOR / MiB:g} (--min-free-disk)",
            f"tmpfs of {TMPFS_BYTES / MiB:g} MiB; fill answers: artifact PUT "
            f"{found['artifact']}, log batches {logs}",
        ),
        row(
            f"{prefix}: disk growth",
            round(found["disk_growth"] / MiB, 1),
            "MiB",
            None,
            "data directory, during the fill and the tries",
        ),
        row(
            f"{prefix}: RSS growth",
            round(found["rss_growth"] / MiB, 1),
            "MiB",
            f"<= {RSS_TARGET_MIB}",
            "server RSS after - before (/proc)",
        ),
    ]
    for kind, statuses in found["tries"].items():
        bad = sum(n for status, n in statuses.items() if not status.startswith(("2", "507")))
        rows.append(
            row(
                f"{prefix}: {kind} on the full disk, failed",
                bad,
                "answers",
                "0 (200, or 507 for new bulk writes)",
                answers(statuses),
            )
        )
    return rows
