"""Reading a chaos run's evidence: the job records over the API, the chaos trainer's
markers, the example trainer's ledger, and the trainers' own output files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.chaos.chaos_invariants import (
    AttemptView,
    Execution,
    JobView,
    LedgerLine,
    TimelineEntry,
)
from tests.e2e.harness import Orchestrator

_PAGE = 500  # the API's largest page


def parse_time(value: str | None) -> float | None:
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def load_jobs(orch: Orchestrator) -> dict[str, JobView]:
    """Every job the orchestrator has (GET /api/queue, paged), each with its detail."""
    ids: list[str] = []
    offset = 0
    while True:
        page = orch.request("GET", f"/api/queue?limit={_PAGE}&offset={offset}")
        ids += [job["job_id"] for job in page["jobs"]]
        offset += len(page["jobs"])
        if not page["jobs"] or offset >= page["total"]:
            break
    return {job_id: job_view(orch.job(job_id)) for job_id in ids}


def job_view(raw: Mapping[str, Any]) -> JobView:
    return JobView(
        job_id=raw["job_id"],
        status=raw["status"],
        attempts=raw["attempts"],
        max_retries=raw["max_retries"],
        worker_id=raw["worker_id"],
        error=raw["error"],
        history=tuple(
            AttemptView(
                number=a["number"],
                worker_id=a["worker_id"],
                dispatched_at=parse_time(a["dispatched_at"]),
                started_at=parse_time(a["started_at"]),
                ended_at=parse_time(a["ended_at"]),
                outcome=a["outcome"],
                reason=a["reason"],
            )
            for a in raw["attempt_history"]
        ),
        timeline=tuple(
            TimelineEntry(parse_time(e["at"]), e["kind"], e["worker_id"], e["attempt"])
            for e in raw["timeline"]
        ),
    )


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_executions(
    markers_path: Path, work_dirs: Mapping[Path, str], killed_at: Mapping[int, float]
) -> list[Execution]:
    """One Execution per trainer process. Its end: its own end marker; else the moment
    the injector had killed it (crash_host); else unknown."""
    starts: dict[int, dict[str, Any]] = {}
    ends: dict[int, dict[str, Any]] = {}
    for marker in read_lines(markers_path):
        (starts if marker["event"] == "start" else ends)[int(marker["pid"])] = marker
    runs = []
    for pid, start in starts.items():
        end = ends.get(pid)
        ended_at = end["at"] if end is not None else killed_at.get(pid)
        runs.append(
            Execution(
                job_id=start["job_id"],
                attempt=int(start["attempt"]),
                worker_id=_worker_of(Path(start["job_dir"]), work_dirs),
                pid=pid,
                agent_pid=int(start["agent_pid"]),
                started_at=float(start["at"]),
                ended_at=float(ended_at) if ended_at is not None else None,
                exit_code=end["exit_code"] if end is not None else None,
            )
        )
    return runs


def load_ledger(path: Path) -> list[LedgerLine]:
    return [
        LedgerLine(line["job_id"], int(line["attempt"]), float(line["finished_at"]))
        for line in read_lines(path)
    ]


def unfinished_trainers(markers_path: Path) -> list[int]:
    """Pids of trainers that wrote a start marker and no end marker (yet)."""
    started: set[int] = set()
    ended: set[int] = set()
    for marker in read_lines(markers_path):
        (started if marker["event"] == "start" else ended).add(int(marker["pid"]))
    return sorted(started - ended)


def _worker_of(job_dir: Path, work_dirs: Mapping[Path, str]) -> str | None:
    for work_dir, worker_id in work_dirs.items():
        if job_dir.is_relative_to(work_dir):
            return worker_id
    return None
