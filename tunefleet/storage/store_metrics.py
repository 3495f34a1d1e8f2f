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
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

import peewee as pw

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
_MAX_INT = 2**63
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
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):  # JSON integers have no bound; a float has
        return abs(value) < _MAX_INT
    return math.isfinite(value)


def thinned_out(points: Sequence[tuple[int, int]]) -> list[int]:
    """The ids to drop from an attempt's (id, step) points, in step order: all but the
    first point of each 2^k-step interval and the newest."""
    width = 1
    while len({step // width for _, step in points}) > MAX_POINTS_PER_ATTEMPT // 2:
        width *= 2
    drop: list[int] = []
    bucket = None
    for point_id, step in points[:-1]:
        if step // width == bucket:
            drop.append(point_id)
        bucket = step // width
    return drop


class MetricRepo:
    def __init__(self) -> None:
        # (points stored, highest step) per (job, attempt): read once, then kept up to
        # date by our own writes, so a report costs no COUNT, and a step past the highest
        # (the usual report) needs no lookup. Forgotten on rollback (Store wires that).
        self._known: dict[tuple[str, int], tuple[int, int]] = {}

    def forget_counts(self) -> None:
        self._known.clear()

    def append(
        self, job_id: str, attempt: int, step: int, values: Mapping[str, float], at: float
    ) -> bool:
        """Store the point; a step already stored for the attempt is replaced (with a new
        id, so readers following `since` see the change) unless its values are the same.
        False when nothing changed (a heartbeat repeating the last report)."""
        count, highest = self._state(job_id, attempt)
        if step <= highest:
            where = {"job": job_id, "attempt": attempt, "step": step}
            found = select_where(JobMetric, ("id", "values"), equal=where)
            if found:
                if found[0][1] == canonical_json(values):
                    return False
                delete_where(JobMetric, equal={"id": found[0][0]})
                count -= 1
        insert_row(
            JobMetric, {"job": job_id, "attempt": attempt, "step": step, "at": at, "values": values}
        )
        count += 1
        if count > MAX_POINTS_PER_ATTEMPT:
            count = self._thin(job_id, attempt)
        self._remember(job_id, attempt, count, max(highest, step))
        return True

    def read(
        self, job_id: str, *, since: int = 0, limit: int, attempt: int | None = None
    ) -> list[JobMetricRow]:
        """Points stored after cursor `since` (a JobMetricRow.id), in storing order."""
        query = JobMetric.select().where(JobMetric.job == job_id, JobMetric.id > since)
        if attempt is not None:
            query = query.where(JobMetric.attempt == attempt)
        return rows_of(JobMetricRow, query.order_by(JobMetric.id).limit(limit))

    def count(self, job_id: str, attempt: int) -> int:
        return self._state(job_id, attempt)[0]

    def _state(self, job_id: str, attempt: int) -> tuple[int, int]:
        known = self._known.get((job_id, attempt))
        if known is None:
            query: Any = JobMetric.select(pw.fn.COUNT(JobMetric.id), pw.fn.MAX(JobMetric.step))
            query = query.where(JobMetric.job == job_id, JobMetric.attempt == attempt)
            count, highest = query.tuples().get()
            known = (int(count), -1 if highest is None else int(highest))
        return known

    def _remember(self, job_id: str, attempt: int, count: int, highest: int) -> None:
        if len(self._known) >= _COUNTS_KEPT and (job_id, attempt) not in self._known:
            self._known.clear()  # finished jobs' are never needed again
        self._known[(job_id, attempt)] = (count, highest)

    def _thin(self, job_id: str, attempt: int) -> int:
        """Keep the first point of each 2^k-step interval and the newest; returns how many
        points remain (at most half the bound, plus one)."""
        query: Any = (
            JobMetric.select(JobMetric.id, JobMetric.step)
            .where(JobMetric.job == job_id, JobMetric.attempt == attempt)
            .order_by(JobMetric.step)
        )
        points: list[tuple[int, int]] = [(int(i), int(s)) for i, s in query.tuples()]
        drop = thinned_out(points)
        for start in range(0, len(drop), _DELETE_CHUNK):
            chunk = drop[start : start + _DELETE_CHUNK]
            JobMetric.delete().where(JobMetric.id.in_(chunk)).execute()
        return len(points) - len(drop)
