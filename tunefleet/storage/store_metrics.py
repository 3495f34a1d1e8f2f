"""Metric history: the numbers of workers' progress reports, per job, attempt and step.

Bounded per attempt so a 100,000-step run stays small: once an attempt holds more than
MAX_POINTS_PER_ATTEMPT points, they are thinned to the first point of each 2^k-step
interval (k the smallest that leaves at most half the bound), plus the newest point. The
run keeps an even resolution from its first step, and fresh points come in at full
resolution until the next thinning; each thinning frees half the bound, so its cost is
shared by at least that many reports. Synchronous: these run on the DB thread.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from tunefleet.storage.models import JobMetric, canonical_json
from tunefleet.storage.rows import JobMetricRow, rows_of
from tunefleet.storage.statements import delete_where, insert_row, select_where

MAX_POINTS_PER_ATTEMPT = 1000
MAX_METRICS_PER_POINT = 32
MAX_METRIC_NAME = 64
# Keys that place a report (where it is), not metrics of it; the first present of
# STEP_KEYS is the step (`step` is tunefleet's spelling, the others common trainers').
STEP_KEYS = ("step", "global_step", "current_step")
NOT_METRICS = frozenset({*STEP_KEYS, "total", "total_steps", "max_steps", "steps", "percent"})
_MAX_STEP = 2**53
_COUNTS_KEPT = 4096  # (job, attempt) point counts remembered; more are read again
_DELETE_CHUNK = 500


def metric_point(progress: Mapping[str, Any] | None) -> tuple[int, dict[str, float]] | None:
    """(step, numeric metrics) of a progress report; None when it names no step or no
    number. Booleans, strings, NaN and infinities are not metrics."""
    if not progress:
        return None
    step = next((progress[k] for k in STEP_KEYS if k in progress), None)
    if not _finite(step) or not 0 <= step < _MAX_STEP:
        return None
    values: dict[str, float] = {}
    for name, value in progress.items():
        if name in NOT_METRICS or not _finite(value) or len(name) > MAX_METRIC_NAME:
            continue
        values[name] = float(value)
        if len(values) == MAX_METRICS_PER_POINT:
            break
    return (int(step), values) if values else None


def _finite(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class MetricRepo:
    def __init__(self) -> None:
        # Points stored per (job, attempt): read once, then kept up to date by our own
        # writes, so a report costs no COUNT. Forgotten on rollback (Store wires that).
        self._counts: dict[tuple[str, int], int] = {}

    def forget_counts(self) -> None:
        self._counts.clear()

    def append(
        self, job_id: str, attempt: int, step: int, values: Mapping[str, float], at: float
    ) -> bool:
        """Store the point; a step already stored for the attempt is replaced (with a new
        id, so readers following `since` see the change) unless its values are the same.
        False when nothing changed (a heartbeat repeating the last report)."""
        stored = canonical_json(values)
        where = {"job": job_id, "attempt": attempt, "step": step}
        found = select_where(JobMetric, ("id", "values"), equal=where)
        count = self._count(job_id, attempt)
        if found:
            if found[0][1] == stored:
                return False
            delete_where(JobMetric, equal={"id": found[0][0]})
            count -= 1
        insert_row(
            JobMetric, {"job": job_id, "attempt": attempt, "step": step, "at": at, "values": values}
        )
        count += 1
        if count > MAX_POINTS_PER_ATTEMPT:
            count = self._thin(job_id, attempt)
        self._remember(job_id, attempt, count)
        return True

    def read(
        self, job_id: str, *, since: int = 0, limit: int, attempt: int | None = None
    ) -> list[JobMetricRow]:
        """Points stored after cursor `since` (a JobMetricRow.id), in storing order."""
        query = JobMetric.select().where(JobMetric.job == job_id, JobMetric.id > since)
        if attempt is not None:
            query = query.where(JobMetric.attempt == attempt)
        return rows_of(JobMetricRow, query.order_by(JobMetric.id).limit(limit))

    def _count(self, job_id: str, attempt: int) -> int:
        count = self._counts.get((job_id, attempt))
        if count is None:
            query = JobMetric.select().where(JobMetric.job == job_id, JobMetric.attempt == attempt)
            count = int(query.count())
        return count

    def _remember(self, job_id: str, attempt: int, count: int) -> None:
        if len(self._counts) >= _COUNTS_KEPT and (job_id, attempt) not in self._counts:
            self._counts.clear()  # finished jobs' counts are never needed again
        self._counts[(job_id, attempt)] = count

    def _thin(self, job_id: str, attempt: int) -> int:
        """Keep the first point of each 2^k-step interval and the newest; returns how many
        points remain (at most half the bound, plus one)."""
        query: Any = (
            JobMetric.select(JobMetric.id, JobMetric.step)
            .where(JobMetric.job == job_id, JobMetric.attempt == attempt)
            .order_by(JobMetric.step)
        )
        points: list[tuple[int, int]] = [(int(i), int(s)) for i, s in query.tuples()]
        width = 1
        while len({step // width for _, step in points}) > MAX_POINTS_PER_ATTEMPT // 2:
            width *= 2
        drop: list[int] = []
        bucket = None
        for point_id, step in points[:-1]:
            if step // width == bucket:
                drop.append(point_id)
            bucket = step // width
        for start in range(0, len(drop), _DELETE_CHUNK):
            chunk = drop[start : start + _DELETE_CHUNK]
            JobMetric.delete().where(JobMetric.id.in_(chunk)).execute()
        return len(points) - len(drop)
