"""Jobs, their attempts, timeline and logs. Synchronous: these run on the DB thread."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

import peewee as pw

from tunefleet.fsm.failure_kinds import INFRA_BUDGET_KINDS
from tunefleet.fsm.job import TERMINAL_JOB_STATES, JobState
from tunefleet.storage.errors import AlreadyExists
from tunefleet.storage.log_quota import LogAppend, quota_marker, split_at_quota
from tunefleet.storage.models import (
    Job,
    JobAttempt,
    JobEvent,
    JobLog,
)
from tunefleet.storage.rows import (
    APART_OUTCOMES,
    AttemptsApart,
    JobAttemptRow,
    JobEventRow,
    JobLogRow,
    JobRow,
    attempts_apart,
    first_of,
    inserted,
    rows_of,
)
from tunefleet.storage.statements import insert_row, savepoint, update_where
from tunefleet.storage.store_base import (
    MAX_PAGE,
    JobOwner,
    Now,
    Viewer,
    checked_fields,
    page,
    state_set,
)

JobOrder = Literal["newest", "seq"]
# Columns only create and cas_state set.
JOB_FIXED = ("id", "seq", "state", "updated_at")
_SEQ_RETRIES = 5
_LOG_CHUNK = 500  # rows per INSERT: well under SQLite's bound-parameter limit


class LogLineLike(Protocol):
    """What append_logs needs of a log line (agent.executor.LogLine fits)."""

    @property
    def seq(self) -> int: ...
    @property
    def stream(self) -> str: ...
    @property
    def line(self) -> str: ...
    @property
    def at(self) -> float: ...


def new_job_values(
    job_id: str, config: dict[str, Any], fields: Mapping[str, Any], now: float
) -> dict[str, Any]:
    """A new job's columns but its `seq`, which each repository numbers its own way.

    `fields` must name settable columns; the state defaults to pending, stored as a plain
    string (what a database gives back) whether the caller passed a JobState or not.
    """
    fields = dict(fields)
    state = str(fields.pop("state", JobState.PENDING))
    values = checked_fields(Job, fields, forbidden=JOB_FIXED)
    values.setdefault("submitted_at", now)
    values.update(id=job_id, state=state, config=config, updated_at=now)
    return values


def job_changes(fields: Mapping[str, Any], now: float) -> dict[str, Any]:
    """What an update or a compare-and-set writes besides the state: settable columns only."""
    values = checked_fields(Job, fields, forbidden=JOB_FIXED)
    values["updated_at"] = now
    return values


# The columns each insert stores (but an auto-numbered id), built here for the SQL
# repository and its in-memory twin (storage/memory_repos.py) alike.
def attempt_values(
    job_id: str, number: int, worker_id: str | None, dispatched_at: float
) -> dict[str, Any]:
    return {"job": job_id, "number": number, "worker_id": worker_id, "dispatched_at": dispatched_at}


def event_values(
    job_id: str,
    kind: str,
    worker_id: str | None,
    attempt: int | None,
    detail: dict[str, Any] | None,
    at: float,
) -> dict[str, Any]:
    """A timeline event's columns but its id (no detail is stored as {})."""
    return {
        "job": job_id,
        "kind": kind,
        "worker_id": worker_id,
        "attempt": attempt,
        "detail": detail or {},
        "at": at,
    }


def log_values(job_id: str, attempt: int, line: LogLineLike) -> dict[str, Any]:
    """A stored log line's columns but its id."""
    return {
        "job": job_id,
        "attempt": attempt,
        "seq": line.seq,
        "stream": line.stream,
        "line": line.line,
        "at": line.at,
    }


class JobRepo:
    def __init__(self, now: Now) -> None:
        self._now = now
        self._next_seq: int | None = None

    # --- jobs ---------------------------------------------------------------------------

    def create(self, job_id: str, *, config: dict[str, Any], **fields: Any) -> JobRow:
        """Insert a job with the next submission `seq` (state defaults to pending).

        Writes in this process are serial on the DB thread, so the next seq is kept in
        memory rather than read with MAX() per job; a conflict on the unique indexes (the
        id exists, or another process took the seq) reads it again and retries.
        """
        return inserted(JobRow, Job, self._insert(job_id, config, fields))

    def insert(self, job_id: str, *, config: dict[str, Any], **fields: Any) -> int:
        """`create` for a caller that needs only the new job's seq: building the row it
        stored (every JSON column parsed back) costs a fifth of the insert."""
        return int(self._insert(job_id, config, fields)["seq"])

    def _insert(
        self, job_id: str, config: dict[str, Any], fields: dict[str, Any]
    ) -> dict[str, Any]:
        values = new_job_values(job_id, config, fields, self._now())
        for attempt in range(_SEQ_RETRIES):
            values["seq"] = self._next_seq or (Job.select(pw.fn.MAX(Job.seq)).scalar() or 0) + 1
            try:
                with savepoint():
                    stored = insert_row(Job, values)
                break
            except pw.IntegrityError:
                self._next_seq = None
                if Job.select().where(Job.id == job_id).exists():
                    raise AlreadyExists(f"job {job_id} already exists") from None
                if attempt == _SEQ_RETRIES - 1:
                    raise
        # A rolled-back transaction leaves a gap in seq, which only orders submissions.
        self._next_seq = values["seq"] + 1
        return stored

    def get(self, job_id: str) -> JobRow | None:
        return first_of(JobRow, Job.select().where(Job.id == job_id))

    def find(
        self,
        *,
        state: str | Collection[str] | None = None,
        worker_id: str | None = None,
        target: str | None = None,
        submitted_by: str | None = None,
        owner: JobOwner | None = None,
        visible_to: Viewer | None = None,
        order: JobOrder = "newest",
        limit: int = 100,
        offset: int = 0,
    ) -> list[JobRow]:
        """Jobs matching every filter given; "newest" = highest seq first, "seq" = oldest.
        ``visible_to``: only the jobs that viewer may see (theirs and their teams')."""
        limit, offset = page(limit, offset)
        query = self._filtered(state, worker_id, target, submitted_by, owner, visible_to)
        ordering = Job.seq.desc() if order == "newest" else Job.seq.asc()
        query = query.order_by(ordering).limit(limit).offset(offset)
        return rows_of(JobRow, query)

    def count(
        self,
        *,
        state: str | Collection[str] | None = None,
        worker_id: str | None = None,
        target: str | None = None,
        submitted_by: str | None = None,
        owner: JobOwner | None = None,
        visible_to: Viewer | None = None,
    ) -> int:
        query = self._filtered(state, worker_id, target, submitted_by, owner, visible_to)
        return int(query.count())

    def counts_by_state(self) -> dict[str, int]:
        query: Any = Job.select(Job.state, pw.fn.COUNT(Job.id)).group_by(Job.state)
        return {state: int(n) for state, n in query.tuples()}

    def nonterminal(self) -> list[JobRow]:
        """Every job not yet completed, failed or cancelled, in submission order."""
        query = Job.select().where(Job.state.not_in(sorted(TERMINAL_JOB_STATES)))
        return rows_of(JobRow, query.order_by(Job.seq))

    def update(self, job_id: str, **fields: Any) -> bool:
        """Set fields other than state (use cas_state); False when the job is unknown."""
        values = job_changes(fields, self._now())
        return bool(update_where(Job, values, equal={"id": job_id}))

    def cas_state(
        self, job_id: str, expected: str | Collection[str], new: str, **changes: Any
    ) -> bool:
        """Move to `new` (setting `changes`) only if the state is still `expected`."""
        values = job_changes(changes, self._now())
        values["state"] = new
        changed = update_where(
            Job, values, equal={"id": job_id}, one_of=("state", state_set(expected))
        )
        return bool(changed)

    def _filtered(
        self,
        state: str | Collection[str] | None,
        worker_id: str | None,
        target: str | None,
        submitted_by: str | None,
        owner: JobOwner | None = None,
        visible_to: Viewer | None = None,
    ) -> pw.ModelSelect[Job]:
        query = Job.select()
        if state is not None:
            query = query.where(Job.state.in_(state_set(state)))
        if worker_id is not None:
            query = query.where(Job.worker_id == worker_id)
        if target is not None:
            query = query.where(Job.target == target)
        if submitted_by is not None:
            query = query.where(Job.submitted_by == submitted_by)
        if owner is not None and owner.user_name is not None:
            query = query.where(Job.user_name == owner.user_name)
        if owner is not None and owner.team_name is not None:
            query = query.where(Job.team_name == owner.team_name)
        if visible_to is not None:
            theirs = Job.user_name == visible_to.user_name
            if visible_to.team_names:
                theirs |= Job.team_name.in_(sorted(visible_to.team_names))
            query = query.where(theirs)
        return query

    # --- attempts -----------------------------------------------------------------------

    def start_attempt(
        self, job_id: str, number: int, *, worker_id: str | None, dispatched_at: float | None = None
    ) -> JobAttemptRow:
        """Record attempt `number` (1-based) dispatched to `worker_id`.

        An unknown job is a foreign-key IntegrityError (a caller bug, not a user error).
        """
        stored = self._insert_attempt(job_id, number, worker_id, dispatched_at)
        return inserted(JobAttemptRow, JobAttempt, stored)

    def insert_attempt(
        self, job_id: str, number: int, *, worker_id: str | None, dispatched_at: float | None = None
    ) -> None:
        """`start_attempt` for a caller that needs no row back."""
        self._insert_attempt(job_id, number, worker_id, dispatched_at)

    def _insert_attempt(
        self, job_id: str, number: int, worker_id: str | None, dispatched_at: float | None
    ) -> dict[str, Any]:
        when = self._now() if dispatched_at is None else dispatched_at
        values = attempt_values(job_id, number, worker_id, when)
        try:
            with savepoint():
                stored = insert_row(JobAttempt, values)
        except pw.IntegrityError:
            clash = JobAttempt.select().where(JobAttempt.job == job_id, JobAttempt.number == number)
            if clash.exists():
                raise AlreadyExists(f"job {job_id} attempt {number} already exists") from None
            raise
        return stored

    def ack_attempt(self, job_id: str, number: int, *, started_at: float | None = None) -> bool:
        """The worker's first report: the attempt is running. Once only."""
        changed = update_where(
            JobAttempt,
            {"started_at": self._now() if started_at is None else started_at},
            equal={"job": job_id, "number": number},
            null=("started_at", "ended_at"),
        )
        return bool(changed)

    def end_attempt(
        self,
        job_id: str,
        number: int,
        *,
        outcome: str,
        reason: str | None = None,
        ended_at: float | None = None,
        kind: str | None = None,
        signature: str | None = None,
    ) -> bool:
        """Close an attempt with its outcome; False if it is unknown or already ended."""
        changed = update_where(
            JobAttempt,
            {
                "outcome": outcome,
                "reason": reason,
                "ended_at": self._now() if ended_at is None else ended_at,
                "kind": kind,
                "signature": signature,
            },
            equal={"job": job_id, "number": number},
            null=("ended_at",),
        )
        return bool(changed)

    def attempts(self, job_id: str) -> list[JobAttemptRow]:
        query = JobAttempt.select().where(JobAttempt.job == job_id).order_by(JobAttempt.number)
        return rows_of(JobAttemptRow, query)

    def count_attempts_apart(self, job_ids: Collection[str]) -> dict[str, AttemptsApart]:
        """Each job's attempts that spent no retry (jobs with none are left out): one
        query for a page of jobs, not one per job."""
        if not job_ids:
            return {}
        query: Any = (
            JobAttempt.select(
                JobAttempt.job, JobAttempt.outcome, JobAttempt.kind, pw.fn.COUNT(JobAttempt.id)
            )
            .where(
                JobAttempt.job.in_(list(job_ids)),
                JobAttempt.outcome.in_(sorted(APART_OUTCOMES))
                | JobAttempt.kind.in_(sorted(kind.value for kind in INFRA_BUDGET_KINDS)),
            )
            .group_by(JobAttempt.job, JobAttempt.outcome, JobAttempt.kind)
        )
        return attempts_apart(
            (job, outcome, kind, int(n)) for job, outcome, kind, n in query.tuples()
        )

    # --- timeline -----------------------------------------------------------------------

    def append_event(
        self,
        job_id: str,
        kind: str,
        *,
        worker_id: str | None = None,
        attempt: int | None = None,
        detail: dict[str, Any] | None = None,
        at: float | None = None,
    ) -> JobEventRow:
        when = self._now() if at is None else at
        values = event_values(job_id, kind, worker_id, attempt, detail, when)
        return inserted(JobEventRow, JobEvent, insert_row(JobEvent, values))

    def insert_event(
        self,
        job_id: str,
        kind: str,
        *,
        worker_id: str | None = None,
        attempt: int | None = None,
        detail: dict[str, Any] | None = None,
        at: float | None = None,
    ) -> None:
        """`append_event` for a caller that needs no row back (the actors' commits)."""
        when = self._now() if at is None else at
        insert_row(JobEvent, event_values(job_id, kind, worker_id, attempt, detail, when))

    def events(self, job_id: str, *, after_id: int = 0, limit: int = MAX_PAGE) -> list[JobEventRow]:
        """The timeline in the order it happened."""
        limit, _ = page(limit, 0)
        query = (
            JobEvent.select()
            .where(JobEvent.job == job_id, JobEvent.id > after_id)
            .order_by(JobEvent.id)
            .limit(limit)
        )
        return rows_of(JobEventRow, query)

    # --- logs ---------------------------------------------------------------------------

    def append_logs(self, job_id: str, attempt: int, lines: Iterable[LogLineLike]) -> int:
        """Store log lines; a line already stored (same job, attempt, seq) is skipped.

        Returns how many were new, so a retried batch is harmless.
        """
        rows = [log_values(job_id, attempt, line) for line in lines]
        inserted = 0
        for start in range(0, len(rows), _LOG_CHUNK):
            query = JobLog.insert_many(rows[start : start + _LOG_CHUNK]).on_conflict_ignore()
            inserted += int(query.as_rowcount().execute())
        return inserted

    def append_logs_within_quota(
        self, job_id: str, attempt: int, lines: Sequence[LogLineLike], max_bytes: int
    ) -> LogAppend:
        """``append_logs`` within the attempt's log quota (storage/log_quota.py): the
        lines that fit are stored, the rest counted on the attempt, and the first batch
        that drops any stores the marker line. One transaction with the counters."""
        counters = (
            JobAttempt.select(JobAttempt.id, JobAttempt.log_bytes, JobAttempt.log_lines_dropped)
            .where(JobAttempt.job == job_id, JobAttempt.number == attempt)
            .tuples()
            .first()
        )
        if counters is None:  # no such attempt: nothing to count against
            return LogAppend(self.append_logs(job_id, attempt, lines))
        attempt_id, used, dropped_before = counters
        # Past the quota every line is dropped: no need to look for ones stored already.
        stored_seqs = set() if dropped_before else self._stored_seqs(job_id, attempt, lines)
        split = split_at_quota(lines, stored_seqs, used, dropped_before > 0, max_bytes)
        stored = self.append_logs(job_id, attempt, split.kept)
        marker = False
        if split.first_dropped_at is not None and not dropped_before:
            line = quota_marker(max_bytes, split.first_dropped_at)
            marker = self.append_logs(job_id, attempt, [line]) == 1
        if split.kept_bytes or split.dropped:
            JobAttempt.update(
                log_bytes=JobAttempt.log_bytes + split.kept_bytes,
                log_lines_dropped=JobAttempt.log_lines_dropped + split.dropped,
            ).where(JobAttempt.id == attempt_id).execute()
        return LogAppend(stored, split.dropped, marker, bool(split.dropped or dropped_before))

    def _stored_seqs(self, job_id: str, attempt: int, lines: Sequence[LogLineLike]) -> set[int]:
        seqs = [line.seq for line in lines]
        found: set[int] = set()
        for start in range(0, len(seqs), _LOG_CHUNK):
            query = JobLog.select(JobLog.seq).where(
                JobLog.job == job_id,
                JobLog.attempt == attempt,
                JobLog.seq.in_(seqs[start : start + _LOG_CHUNK]),
            )
            found.update(row[0] for row in query.tuples().iterator())
        return found

    def read_logs(
        self,
        job_id: str,
        *,
        after_id: int = 0,
        limit: int = MAX_PAGE,
        attempt: int | None = None,
    ) -> list[JobLogRow]:
        """Lines stored after cursor `after_id` (a JobLogRow.id), oldest first."""
        limit, _ = page(limit, 0)
        query = JobLog.select().where(JobLog.job == job_id, JobLog.id > after_id)
        if attempt is not None:
            query = query.where(JobLog.attempt == attempt)
        query = query.order_by(JobLog.id).limit(limit)
        return rows_of(JobLogRow, query)
