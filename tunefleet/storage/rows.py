"""What the store returns: frozen, detached copies of rows.

Plain dataclasses rather than peewee model instances because a model instance can run a
query when touched (a foreign key, `save()`), and the store's callers live on the event
loop, where no query may run. Field names follow the models; a foreign key `job` appears
as `job_id`, `worker` as `worker_id`. Frozen is shallow: do not mutate the dicts/lists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import peewee as pw

from tunefleet.fsm.failure_kinds import INFRA_BUDGET_KINDS, KIND_OF_OUTCOME, FailureKind
from tunefleet.storage.models import stored_as_is

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class WorkerRow:
    id: str
    name: str
    worker_type: str
    state: str
    drain_requested: bool
    is_local: bool
    labels: dict[str, str]
    agent_labels: dict[str, str]
    gpu_info: dict[str, Any]
    gpu_count: int
    gpu_name: str | None
    gpu_vram_gb: float | None
    accelerator_type: str | None
    provider: str | None
    current_job_id: str | None
    persistent_agent: bool | None
    hostname: str | None
    client_address: str | None
    last_event_id: int
    gpu_utilization: list[float]
    vram_used_gb: list[float]
    last_heartbeat_at: float | None
    connected_at: float | None
    last_seen_at: float | None
    offline_at: float | None
    created_at: float
    updated_at: float
    agent_name: str | None = None
    quarantine_reason: str | None = None
    quarantined_at: float | None = None


@dataclass(frozen=True, slots=True)
class WorkerTokenRow:
    id: int
    worker_id: str
    token_hash: str
    created_at: float
    revoked_at: float | None


@dataclass(frozen=True, slots=True)
class ApiTokenRow:
    id: int
    name: str
    token_hash: str
    permissions: list[str]
    created_at: float
    last_used_at: float | None
    revoked_at: float | None
    user_id: int | None = None


@dataclass(frozen=True, slots=True)
class UserRow:
    id: int
    name: str
    role: str
    grants: list[str]
    disabled: bool
    password_hash: str | None
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class TeamRow:
    id: int
    name: str
    created_at: float


@dataclass(frozen=True, slots=True)
class TeamBudgetRow:
    id: int
    team_name: str
    gpu_hours: float
    period: str
    action: str
    updated_at: float


@dataclass(frozen=True, slots=True)
class ApprovalRuleRow:
    id: int
    condition: str
    threshold: str
    exempt_roles: list[str]
    enabled: bool
    created_at: float


@dataclass(frozen=True, slots=True)
class TeamMemberRow:
    id: int
    team_id: int
    user_id: int
    is_default: bool
    created_at: float


@dataclass(frozen=True, slots=True)
class JobRow:
    id: str
    seq: int
    name: str | None
    config_name: str | None
    config: dict[str, Any]
    dataloader: Any
    command: list[str] | None
    env: dict[str, str]
    target: str
    worker_labels: dict[str, str]
    gpu_count: int
    min_vram_gb: float | None
    gpu_name: str | None
    priority: int
    max_retries: int
    attempts: int
    timeout_minutes: float | None
    state: str
    worker_id: str | None
    submitted_by: str | None
    submitted_at: float
    dispatched_at: float | None
    started_at: float | None
    finished_at: float | None
    progress: dict[str, Any] | None
    error: str | None
    wait_reason: str | None
    updated_at: float
    user_name: str | None = None
    team_name: str | None = None
    local_unisolated: bool | None = None


@dataclass(frozen=True, slots=True)
class JobAttemptRow:
    id: int
    job_id: str
    number: int
    worker_id: str | None
    dispatched_at: float
    started_at: float | None
    ended_at: float | None
    outcome: str | None
    reason: str | None
    log_bytes: int = 0
    log_lines_dropped: int = 0
    kind: str | None = None
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptsApart:
    """A job's attempts that spent no retry (tunefleet/fsm/job.py): dispatches that never
    reached their worker, preempted attempts, and those the infrastructure ended (they
    spend --infra-retries instead)."""

    undelivered: int = 0
    preempted: int = 0
    infrastructure: int = 0


# Attempt outcomes that spent no retry; an attempt of any outcome whose kind is
# infrastructure spent none either (attempts from before kinds were stored have none, and
# count as they did then).
APART_OUTCOMES: Final = frozenset(
    outcome
    for outcome, kind in KIND_OF_OUTCOME.items()
    if kind in (FailureKind.UNDELIVERED, FailureKind.PREEMPTED)
)


def attempts_apart(
    counts: Iterable[tuple[str, str | None, str | None, int]],
) -> dict[str, AttemptsApart]:
    """(job, outcome, kind, how many) → each job's AttemptsApart."""
    found: dict[str, dict[str, int]] = {}
    for job_id, outcome, kind, n in counts:
        if outcome in APART_OUTCOMES:
            key = KIND_OF_OUTCOME[outcome].value
        elif kind in INFRA_BUDGET_KINDS:
            key = "infrastructure"
        else:
            continue
        tally = found.setdefault(job_id, {})
        tally[key] = tally.get(key, 0) + n
    return {job_id: AttemptsApart(**tally) for job_id, tally in found.items()}


@dataclass(frozen=True, slots=True)
class JobEventRow:
    id: int
    job_id: str
    at: float
    kind: str
    worker_id: str | None
    attempt: int | None
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class JobLogRow:
    id: int  # the read cursor: ids grow in insertion order
    job_id: str
    attempt: int
    seq: int
    at: float
    stream: str
    line: str


@dataclass(frozen=True, slots=True)
class JobMetricRow:
    id: int  # the read cursor: ids grow in insertion order
    job_id: str
    attempt: int
    step: int
    at: float
    values: dict[str, float]


@dataclass(frozen=True, slots=True)
class AuditEventRow:
    id: int
    at: float
    kind: str
    actor: str | None
    client_address: str | None
    target: str | None
    outcome: str
    detail: dict[str, Any]
    prev_hash: str
    hash: str


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def to_row(cls: type[R], data: Mapping[str, Any]) -> R:
    """Build a row from one peewee `.dicts()` result (foreign keys keyed by field name)."""
    values = {}
    for name in _field_names(cls):
        if name in data:
            values[name] = data[name]
        else:  # `job_id` comes back as `job`
            values[name] = data[name.removesuffix("_id")]
    return cls(**values)


def rows_of(cls: type[R], query: Any) -> list[R]:
    """Run a model select and copy every result into `cls`."""
    return [to_row(cls, data) for data in query.dicts()]


def first_of(cls: type[R], query: Any) -> R | None:
    """The first result of a model select as `cls`, or None."""
    rows = rows_of(cls, query.limit(1))
    return rows[0] if rows else None


def inserted(cls: type[R], model: type[pw.Model], stored: Mapping[str, Any]) -> R:
    """The row an INSERT stored, built without reading it back: ``stored`` holds every
    field as the database does (statements.insert_row returns it), and each goes
    through its field's ``python_value``, as a read would (a float column gives a float,
    JSON comes back parsed); a value its field reads back unchanged is taken as it is."""
    values = {}
    for name, field_name, kind, python_value in _model_fields(cls, model):
        value = stored[field_name]
        if value is not None and value.__class__ is not kind:
            value = python_value(value)
        values[name] = value
    return cls(**values)


_MODEL_FIELDS: dict[tuple[type, type], tuple[tuple[str, str, Any, Any], ...]] = {}


def _model_fields(cls: type, model: type[pw.Model]) -> tuple[tuple[str, str, Any, Any], ...]:
    """(row field name, model field name, the class read back unchanged, python_value) for
    each row field; a foreign key `job` serves the row's `job_id`."""
    key = (cls, model)
    columns = _MODEL_FIELDS.get(key)
    if columns is None:
        fields = model._meta.fields
        pairs = [
            (name, fields.get(name) or fields[name.removesuffix("_id")])
            for name in _field_names(cls)
        ]
        columns = _MODEL_FIELDS[key] = tuple(
            (name, f.name, stored_as_is(f), f.python_value) for name, f in pairs
        )
    return columns
