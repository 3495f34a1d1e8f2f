"""The peewee models: the current (latest) schema, bound at open time through a proxy.

The models describe the schema that the last migration produces; the migrations (not
`create_tables`) build it. Timestamps are floats (unix seconds, UTC) named `*_at`; JSON
columns hold dicts and lists as canonical JSON text, which works the same on SQLite and
PostgreSQL. Floats are `DoubleField`: PostgreSQL's `REAL` would round a unix timestamp to
the minute.
"""

from __future__ import annotations

import json
import threading
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

import peewee as pw

from tunefleet.fsm.job import JobState
from tunefleet.webhooks.policy import DeliveryState


def canonical_json(value: object) -> str:
    """One spelling per value (sorted keys, no spaces), so stored text and hashes are stable."""
    if not value and value.__class__ in _EMPTY:  # most timeline details and job envs
        return _EMPTY[value.__class__]
    if c_make_encoder is None:  # a Python without the json accelerator
        return _CANONICAL.encode(value)
    # What _CANONICAL.encode runs, without its per-call Python set-up (a closure, option
    # lookups): a job cycle encodes some fifteen values. The markers dict is new each
    # call, so a circular value is still refused.
    encode = c_make_encoder({}, _DEFAULT, encode_basestring, None, ":", ",", True, False, False)
    return "".join(encode(value, 0))


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_EMPTY = {dict: "{}", list: "[]"}
_DEFAULT = _CANONICAL.default  # refuses what JSON cannot hold, as json.dumps does


class ThreadBoundProxy(pw.DatabaseProxy):
    """A DatabaseProxy whose target is per thread.

    Each `Database` initializes it on its own DB thread, so several databases can be open
    in one process (tests, tools), and a model query from any other thread (the event loop
    above all) fails at once instead of blocking it.
    """

    __slots__ = ("_local",)

    def __init__(self) -> None:
        object.__setattr__(self, "_local", threading.local())
        super().__init__()

    def __setattr__(self, attr: str, value: Any) -> None:
        # Proxy.__setattr__ only knows its own __slots__; `obj` is a property here.
        object.__setattr__(self, attr, value)

    @property
    def obj(self) -> pw.Database | None:
        return getattr(self._local, "database", None)

    @obj.setter
    def obj(self, database: pw.Database | None) -> None:
        self._local.database = database

    def __getattr__(self, attr: str) -> Any:
        database = self.obj
        if database is None:
            raise AttributeError(
                "storage models are only usable on the database thread: "
                "go through Database.read()/write() or Store"
            )
        return getattr(database, attr)


database_proxy = ThreadBoundProxy()


class JsonField(pw.TextField):
    """A dict/list (or None) stored as canonical JSON text: portable across backends."""

    def db_value(self, value: Any) -> str | None:
        if value is None:
            return None
        return canonical_json(value)

    def python_value(self, value: Any) -> Any:
        if value is None:
            return None
        return json.loads(value)


def stored_as_is(field: pw.Field) -> type | None:
    """The class whose values a field stores, and reads back, unchanged: its db_value and
    python_value are the identity on them (peewee's adapt: ``str``, ``float``, ``int``,
    ``bool``), so converting them is skipped. None: always convert (JSON, anything else)."""
    if isinstance(field, pw.ForeignKeyField):
        return stored_as_is(field.rel_field)
    for base, kind in _AS_IS:
        if isinstance(field, base) and all(
            getattr(type(field), name) is getattr(base, name) for name in _CONVERTERS
        ):
            return kind
    return None  # JsonField is a TextField with its own conversion: always converted


_CONVERTERS = ("adapt", "db_value", "python_value")
_AS_IS: tuple[tuple[type[pw.Field], type], ...] = (
    (pw.CharField, str),
    (pw.TextField, str),
    (pw.FloatField, float),
    (pw.IntegerField, int),  # exactly int: a bool is converted to 1 or 0
    (pw.BooleanField, bool),
)


class BaseModel(pw.Model):
    class Meta:
        database = database_proxy
        legacy_table_names = False


class SchemaVersion(BaseModel):
    version = pw.IntegerField(primary_key=True)
    description = pw.TextField()
    applied_at = pw.DoubleField()

    class Meta:
        table_name = "schema_version"


class Worker(BaseModel):
    id = pw.CharField(max_length=64, primary_key=True)
    name = pw.TextField()
    worker_type = pw.CharField(max_length=16)  # "persistent" | "ephemeral"
    state = pw.CharField(max_length=16)
    drain_requested = pw.BooleanField(default=False)
    is_local = pw.BooleanField(default=False)
    labels = JsonField(default=dict)  # admin-assigned
    agent_labels = JsonField(default=dict)  # sent by the agent
    gpu_info = JsonField(default=dict)
    gpu_count = pw.IntegerField(default=0)
    gpu_name = pw.TextField(null=True)
    gpu_vram_gb = pw.DoubleField(null=True)
    accelerator_type = pw.TextField(null=True)
    provider = pw.TextField(null=True)
    current_job_id = pw.CharField(max_length=64, null=True)
    persistent_agent = pw.BooleanField(null=True)
    hostname = pw.TextField(null=True)
    client_address = pw.TextField(null=True)
    last_event_id = pw.BigIntegerField(default=0)
    gpu_utilization = JsonField(default=list)
    vram_used_gb = JsonField(default=list)
    last_heartbeat_at = pw.DoubleField(null=True)
    connected_at = pw.DoubleField(null=True)
    last_seen_at = pw.DoubleField(null=True)
    offline_at = pw.DoubleField(null=True)  # added by migration 2
    agent_name = pw.TextField(null=True)  # added by migration 7: the name the agent sent
    # Added by migration 17: why the worker is quarantined (None: it is not), and since when.
    quarantine_reason = pw.TextField(null=True)
    quarantined_at = pw.DoubleField(null=True)
    created_at = pw.DoubleField()
    updated_at = pw.DoubleField()


class WorkerToken(BaseModel):
    id = pw.AutoField()
    worker = pw.ForeignKeyField(Worker, on_delete="CASCADE", column_name="worker_id")
    token_hash = pw.CharField(max_length=128, unique=True)
    created_at = pw.DoubleField()
    revoked_at = pw.DoubleField(null=True)


class ApiToken(BaseModel):
    id = pw.AutoField()
    name = pw.TextField()
    token_hash = pw.CharField(max_length=128, unique=True)
    permissions = JsonField(default=list)
    created_at = pw.DoubleField()
    last_used_at = pw.DoubleField(null=True)
    revoked_at = pw.DoubleField(null=True)
    # Added by migration 10: the user the token acts for. A plain column: users are never
    # deleted, and storage/store_users.py only ever stores the id of one.
    user_id = pw.IntegerField(null=True)

    class Meta:
        table_name = "api_token"


class User(BaseModel):
    """Added by migration 10. Never deleted (disabled instead), never renamed: jobs name
    their user by `name`."""

    id = pw.AutoField()
    name = pw.CharField(max_length=64, unique=True)
    role = pw.CharField(max_length=16)  # http/roles.py: viewer | researcher | lead | admin
    # Permissions granted beside the role (queue.command, queue.local): separate grants.
    grants = JsonField(default=list)
    disabled = pw.BooleanField(default=False)
    password_hash = pw.TextField(null=True)  # for sign-in, which a later change adds
    created_at = pw.DoubleField()
    updated_at = pw.DoubleField()

    class Meta:
        table_name = "app_user"  # "user" is a reserved word in PostgreSQL


class Team(BaseModel):
    """Added by migration 10. Never renamed: jobs name their team by `name`. Its
    concurrency limits (migration 12; None: unlimited) are read by store_limits."""

    id = pw.AutoField()
    name = pw.CharField(max_length=64, unique=True)
    created_at = pw.DoubleField()
    max_jobs = pw.IntegerField(null=True)
    max_gpus = pw.IntegerField(null=True)

    class Meta:
        table_name = "team"


class TeamMember(BaseModel):
    """Added by migration 10: a user in a team; `is_default` marks the team a submit
    without `team` goes to (one per user)."""

    id = pw.AutoField()
    team = pw.ForeignKeyField(Team, on_delete="CASCADE", column_name="team_id")
    user = pw.ForeignKeyField(User, on_delete="CASCADE", column_name="user_id", index=False)
    is_default = pw.BooleanField(default=False)
    created_at = pw.DoubleField()

    class Meta:
        table_name = "team_member"
        indexes = ((("user", "team"), True),)


class ConcurrencySetting(BaseModel):
    """Added by migration 12: the fleet's concurrency limits, one row (id 1) once set;
    None (or no row) is unlimited."""

    id = pw.IntegerField(primary_key=True)
    max_concurrent = pw.IntegerField(null=True)
    user_max_concurrent = pw.IntegerField(null=True)
    updated_at = pw.DoubleField()

    class Meta:
        table_name = "concurrency_setting"


class Job(BaseModel):
    id = pw.CharField(max_length=64, primary_key=True)
    seq = pw.IntegerField(unique=True)  # submission order
    name = pw.TextField(null=True)
    config_name = pw.TextField(null=True)
    config = JsonField(default=dict)
    dataloader = JsonField(null=True)
    command = JsonField(null=True)  # list of argv strings, or None for the default command
    env = JsonField(default=dict)
    target = pw.CharField(max_length=16, default="auto")
    worker_labels = JsonField(default=dict)
    gpu_count = pw.IntegerField(default=1)
    min_vram_gb = pw.DoubleField(null=True)
    gpu_name = pw.TextField(null=True)
    priority = pw.IntegerField(default=0)
    max_retries = pw.IntegerField(default=3)
    attempts = pw.IntegerField(default=0)
    timeout_minutes = pw.DoubleField(null=True)
    state = pw.CharField(max_length=16, default=JobState.PENDING.value)
    worker_id = pw.CharField(max_length=64, null=True)  # current assignment, not a FK
    submitted_by = pw.TextField(null=True)
    submitted_at = pw.DoubleField()
    dispatched_at = pw.DoubleField(null=True)
    started_at = pw.DoubleField(null=True)
    finished_at = pw.DoubleField(null=True)
    progress = JsonField(null=True)
    error = pw.TextField(null=True)
    wait_reason = pw.TextField(null=True)
    updated_at = pw.DoubleField()
    # Added by migration 9: its submitter controls the orchestrator, so a local run may be
    # as the orchestrator's own user (tunefleet/actors/local_isolation.py); None (older
    # rows): isolated.
    local_unisolated = pw.BooleanField(null=True)
    # Added by migration 10: whose job it is (names: users and teams are never renamed).
    user_name = pw.TextField(null=True)
    team_name = pw.TextField(null=True)


class JobAttempt(BaseModel):
    id = pw.AutoField()
    # No index of its own: the unique (job_id, number) one serves it (migration 8).
    job = pw.ForeignKeyField(Job, on_delete="CASCADE", column_name="job_id", index=False)
    number = pw.IntegerField()
    worker_id = pw.CharField(max_length=64, null=True)
    dispatched_at = pw.DoubleField()
    started_at = pw.DoubleField(null=True)
    ended_at = pw.DoubleField(null=True)
    outcome = pw.CharField(max_length=16, null=True)
    reason = pw.TextField(null=True)
    # Added by migration 11: the attempt's stored log (bytes as storage/log_quota.py counts
    # them) and the lines dropped past its quota.
    log_bytes = pw.BigIntegerField(default=0)
    log_lines_dropped = pw.BigIntegerField(default=0)
    # Added by migration 17: the end's kind (fsm/failure_kinds.py; None: completed, or
    # not ended) and a job error's signature or what gave an infrastructure failure away.
    kind = pw.CharField(max_length=16, null=True)
    signature = pw.TextField(null=True)

    class Meta:
        table_name = "job_attempt"


class TeamBudget(BaseModel):
    """Added by migration 12: a team's GPU-hour budget per day, week or month (UTC), and
    what a submit past it meets (`warn` or `block`). One per team; named by the team's
    name, as jobs are (teams are never renamed)."""

    id = pw.AutoField()
    team_name = pw.CharField(max_length=64, unique=True)
    gpu_hours = pw.DoubleField()
    period = pw.CharField(max_length=8)
    action = pw.CharField(max_length=8)
    updated_at = pw.DoubleField()

    class Meta:
        table_name = "team_budget"


class TeamQuotaRow(BaseModel):
    """Added by migration 15: a team's GPU quota (in all and/or per flavor glob, the
    flavors as a JSON object), fair-share weight and borrowing limit (None: unlimited).
    Named by the team's name, as jobs are; gone when the quota is cleared."""

    id = pw.AutoField()
    team_name = pw.CharField(max_length=64, unique=True)
    gpus = pw.IntegerField(null=True)
    flavors = pw.TextField(default="{}")
    weight = pw.DoubleField(default=1.0)
    borrow_limit = pw.IntegerField(null=True)
    updated_at = pw.DoubleField()

    class Meta:
        table_name = "team_quota"


class JobEvent(BaseModel):
    id = pw.BigAutoField()
    job = pw.ForeignKeyField(Job, on_delete="CASCADE", column_name="job_id")
    at = pw.DoubleField()
    kind = pw.CharField(max_length=32)
    worker_id = pw.CharField(max_length=64, null=True)
    attempt = pw.IntegerField(null=True)
    detail = JsonField(default=dict)

    class Meta:
        table_name = "job_event"


class JobLog(BaseModel):
    """Added by migration 2."""

    id = pw.BigAutoField()
    job = pw.ForeignKeyField(Job, on_delete="CASCADE", column_name="job_id", index=False)
    attempt = pw.IntegerField()
    seq = pw.IntegerField()
    at = pw.DoubleField()
    stream = pw.CharField(max_length=8)  # "stdout" | "stderr"
    line = pw.TextField()

    class Meta:
        table_name = "job_log"


class JobMetric(BaseModel):
    """Added by migration 3: one progress report's numbers at one step of one attempt."""

    id = pw.BigAutoField()  # the read cursor (`since`): a re-reported step gets a new id
    job = pw.ForeignKeyField(Job, on_delete="CASCADE", column_name="job_id", index=False)
    attempt = pw.IntegerField()
    step = pw.BigIntegerField()
    at = pw.DoubleField()
    values = JsonField(default=dict)  # {"loss": 0.41, "lr": 0.0001, ...}

    class Meta:
        table_name = "job_metric"


class AuditEvent(BaseModel):
    id = pw.BigAutoField()
    at = pw.DoubleField()
    kind = pw.CharField(max_length=64)
    actor = pw.TextField(null=True)
    client_address = pw.TextField(null=True)
    target = pw.TextField(null=True)
    outcome = pw.CharField(max_length=16)
    detail = JsonField(default=dict)
    prev_hash = pw.CharField(max_length=64)
    hash = pw.CharField(max_length=64)

    class Meta:
        table_name = "audit_event"


class UploadToken(BaseModel):
    """Added by migration 3: one per dispatch of a job (job and attempt), hashed."""

    id = pw.AutoField()
    job = pw.ForeignKeyField(Job, on_delete="CASCADE", column_name="job_id")
    attempt = pw.IntegerField()
    token_hash = pw.CharField(max_length=128, unique=True)
    created_at = pw.DoubleField()

    class Meta:
        table_name = "upload_token"


class Artifact(BaseModel):
    """Added by migration 3: one stored object, its key relative to the job's output dir.
    `sha256` is None only for an object a bucket holds that no manifest described."""

    id = pw.BigAutoField()
    job = pw.ForeignKeyField(Job, on_delete="CASCADE", column_name="job_id", index=False)
    key = pw.TextField()
    size = pw.BigIntegerField()
    sha256 = pw.CharField(max_length=64, null=True)
    attempt = pw.IntegerField()
    created_at = pw.DoubleField()

    class Meta:
        table_name = "artifact"


class Checkpoint(BaseModel):
    """Added by migration 3: a checkpoint whose manifest is stored (so it is complete)."""

    id = pw.AutoField()
    job = pw.ForeignKeyField(Job, on_delete="CASCADE", column_name="job_id", index=False)
    name = pw.TextField()
    step = pw.BigIntegerField()
    attempt = pw.IntegerField()
    bytes = pw.BigIntegerField()
    created_at = pw.DoubleField()

    class Meta:
        table_name = "checkpoint"


class MultipartUpload(BaseModel):
    """Added by migration 3: an unfinished multipart upload (the bucket's own id for it
    in `backend_id`, when a bucket holds the parts)."""

    id = pw.CharField(max_length=64, primary_key=True)
    job = pw.ForeignKeyField(Job, on_delete="CASCADE", column_name="job_id")
    key = pw.TextField()
    attempt = pw.IntegerField()
    backend_id = pw.TextField(null=True)
    created_at = pw.DoubleField()

    class Meta:
        table_name = "multipart_upload"


ALL_MODELS: tuple[type[BaseModel], ...] = (
    SchemaVersion,
    Worker,
    WorkerToken,
    ApiToken,
    User,
    Team,
    TeamMember,
    ConcurrencySetting,
    Job,
    JobAttempt,
    TeamBudget,
    TeamQuotaRow,
    JobEvent,
    JobLog,
    JobMetric,
    AuditEvent,
    UploadToken,
    Artifact,
    Checkpoint,
    MultipartUpload,
)


class ApprovalRule(BaseModel):
    """Added by migration 12: an admin-defined rule that holds matching submits for
    approval (approval_rules.py evaluates them in id order)."""

    id = pw.AutoField()
    condition = pw.CharField(max_length=32)
    threshold = pw.TextField(default="")
    exempt_roles = JsonField(default=list)
    enabled = pw.BooleanField(default=True)
    created_at = pw.DoubleField()

    class Meta:
        table_name = "approval_rule"


class WebhookSubscription(BaseModel):
    """Added by migration 16 (issue 27): where events are sent. The secret is kept as
    given (the server signs with it), shown once, masked everywhere after."""

    id = pw.AutoField()
    url = pw.TextField()
    secret = pw.TextField()
    events = JsonField(default=list)
    team_name = pw.TextField(null=True)
    user_name = pw.TextField(null=True)
    worker_labels = JsonField(default=dict)
    format = pw.CharField(max_length=8, default="json")
    # A user's own subscription (no admin.webhooks): only that user's jobs' events.
    owner = pw.TextField(null=True)
    created_by = pw.TextField()
    created_at = pw.DoubleField()
    disabled_at = pw.DoubleField(null=True)
    disabled_reason = pw.TextField(null=True)

    class Meta:
        table_name = "webhook_subscription"


class WebhookEvent(BaseModel):
    """The outbox: one row per event, written in the transaction of its change."""

    id = pw.BigAutoField()
    event_id = pw.CharField(max_length=64, unique=True)
    kind = pw.CharField(max_length=32)
    body = JsonField()
    created_at = pw.DoubleField()

    class Meta:
        table_name = "webhook_event"


class WebhookDelivery(BaseModel):
    """One event to one subscription; ``delivery_id`` is the idempotency id a receiver
    sees on every attempt (X-Tunefleet-Delivery)."""

    id = pw.BigAutoField()
    delivery_id = pw.CharField(max_length=64, unique=True)
    event = pw.BigIntegerField(column_name="event_id")
    subscription = pw.IntegerField(column_name="subscription_id")
    state = pw.CharField(max_length=16, default=DeliveryState.PENDING.value)
    attempts = pw.IntegerField(default=0)
    next_at = pw.DoubleField()
    created_at = pw.DoubleField()
    last_status = pw.IntegerField(null=True)
    last_error = pw.TextField(null=True)
    last_latency_ms = pw.DoubleField(null=True)
    delivered_at = pw.DoubleField(null=True)

    class Meta:
        table_name = "webhook_delivery"
        indexes = ((("state", "next_at"), False), (("subscription", "id"), False))


class WebhookAttempt(BaseModel):
    """The delivery log: each attempt's answer and how long it took."""

    id = pw.BigAutoField()
    delivery = pw.BigIntegerField(column_name="delivery_id", index=True)
    at = pw.DoubleField()
    status_code = pw.IntegerField(null=True)
    latency_ms = pw.DoubleField()
    error = pw.TextField(null=True)

    class Meta:
        table_name = "webhook_attempt"


WEBHOOK_MODELS: tuple[type[BaseModel], ...] = (
    WebhookSubscription,
    WebhookEvent,
    WebhookDelivery,
    WebhookAttempt,
)
ALL_MODELS += WEBHOOK_MODELS
