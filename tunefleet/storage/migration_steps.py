"""Each schema migration's step, in version order (the list is migrations.MIGRATIONS).

A step is written once and frozen: the models it declares are copies of what the tables
were at its version, never the live ones of models.py, so a later change to a model never
changes what an old migration does.
"""

from __future__ import annotations

import json
import time

import peewee as pw
from playhouse.migrate import SchemaMigrator
from playhouse.sqlite_ext import AutoIncrementField

from tunefleet.storage.schema_v1 import v1_models


def initial_schema(database: pw.Database) -> None:
    database.create_tables(v1_models(database), safe=False)


def job_logs_and_indexes(database: pw.Database) -> None:
    class JobRef(pw.Model):  # only what the foreign key needs of the job table
        id = pw.CharField(max_length=64, primary_key=True)

        class Meta:
            table_name = "job"

    class JobLog(pw.Model):
        id = pw.BigAutoField()
        job = pw.ForeignKeyField(JobRef, on_delete="CASCADE", column_name="job_id", index=False)
        attempt = pw.IntegerField()
        seq = pw.IntegerField()
        at = pw.DoubleField()
        stream = pw.CharField(max_length=8)
        line = pw.TextField()

        class Meta:
            table_name = "job_log"

    JobRef._meta.set_database(database)
    JobLog._meta.set_database(database)
    JobLog.create_table(safe=False)
    migrator = SchemaMigrator.from_database(database)
    index = migrator.add_index
    migrator.migrate(
        migrator.add_column("worker", "offline_at", pw.DoubleField(null=True)),
        # Duplicate log batches (an agent retrying a POST) are ignored by this key.
        index("job_log", ("job_id", "attempt", "seq"), unique=True),
        index("job_log", ("job_id", "id")),
        index("job", ("state", "seq")),
        index("job", ("worker_id",)),
        index("job", ("target", "seq")),
        index("worker", ("state",)),
        index("audit_event", ("kind", "id")),
        index("audit_event", ("actor", "id")),
        index("audit_event", ("at",)),
    )


def job_metrics(database: pw.Database) -> None:
    class JobRef(pw.Model):
        id = pw.CharField(max_length=64, primary_key=True)

        class Meta:
            table_name = "job"

    # Ids are the readers' cursor, and a replaced step is deleted then inserted again:
    # SQLite would hand the deleted highest id out again without AUTOINCREMENT.
    sqlite = isinstance(database, pw.SqliteDatabase)
    id_field = AutoIncrementField() if sqlite else pw.BigAutoField()

    class JobMetric(pw.Model):
        id = id_field
        job = pw.ForeignKeyField(JobRef, on_delete="CASCADE", column_name="job_id", index=False)
        attempt = pw.IntegerField()
        step = pw.BigIntegerField()
        at = pw.DoubleField()
        values = pw.TextField()

        class Meta:
            table_name = "job_metric"

    JobRef._meta.set_database(database)
    JobMetric._meta.set_database(database)
    JobMetric.create_table(safe=False)
    migrator = SchemaMigrator.from_database(database)
    migrator.migrate(
        # One point per step of an attempt; also what thinning and the reads walk.
        migrator.add_index("job_metric", ("job_id", "attempt", "step"), unique=True),
        migrator.add_index("job_metric", ("job_id", "id")),
    )


# Before queue.command and queue.local existed, every token that could submit could do
# what they now guard; a token holding every permission of that time (the admin token
# and its equals) keeps all it could do. Frozen: these are the permissions of release 2.
_RELEASE_2_PERMISSIONS = frozenset({"admin.workers", "queue.submit", "queue.admin", "audit.read"})
_SPLIT_OFF_PERMISSIONS = ("queue.command", "queue.local")


def full_tokens_keep_command_and_local(database: pw.Database) -> None:
    table = pw.Table("api_token").bind(database)
    token_id, permissions = table.c.id, table.c.permissions
    for row in list(table.select(token_id, permissions).dicts()):
        held = json.loads(row["permissions"] or "[]")
        if set(held) >= _RELEASE_2_PERMISSIONS:
            added = held + [p for p in _SPLIT_OFF_PERMISSIONS if p not in held]
            text = json.dumps(added, separators=(",", ":"))
            table.update(permissions=text).where(token_id == row["id"]).execute()


def artifacts(database: pw.Database) -> None:
    """Upload tokens, stored artifacts, complete checkpoints, unfinished multipart uploads
    (issue 12). Frozen copies of the models as they were at version 5."""

    class JobRef(pw.Model):
        id = pw.CharField(max_length=64, primary_key=True)

        class Meta:
            table_name = "job"

    def job_fk(index: bool) -> pw.ForeignKeyField:
        return pw.ForeignKeyField(JobRef, on_delete="CASCADE", column_name="job_id", index=index)

    class UploadToken(pw.Model):
        id = pw.AutoField()
        job = job_fk(True)
        attempt = pw.IntegerField()
        token_hash = pw.CharField(max_length=128, unique=True)
        created_at = pw.DoubleField()

        class Meta:
            table_name = "upload_token"

    class Artifact(pw.Model):
        id = pw.BigAutoField()
        job = job_fk(False)
        key = pw.TextField()
        size = pw.BigIntegerField()
        sha256 = pw.CharField(max_length=64, null=True)
        attempt = pw.IntegerField()
        created_at = pw.DoubleField()

        class Meta:
            table_name = "artifact"

    class Checkpoint(pw.Model):
        id = pw.AutoField()
        job = job_fk(False)
        name = pw.TextField()
        step = pw.BigIntegerField()
        attempt = pw.IntegerField()
        bytes = pw.BigIntegerField()
        created_at = pw.DoubleField()

        class Meta:
            table_name = "checkpoint"

    class MultipartUpload(pw.Model):
        id = pw.CharField(max_length=64, primary_key=True)
        job = job_fk(True)
        key = pw.TextField()
        attempt = pw.IntegerField()
        backend_id = pw.TextField(null=True)
        created_at = pw.DoubleField()

        class Meta:
            table_name = "multipart_upload"

    models = (JobRef, UploadToken, Artifact, Checkpoint, MultipartUpload)
    for model in models:
        model._meta.set_database(database)
    database.create_tables(models[1:], safe=False)
    migrator = SchemaMigrator.from_database(database)
    migrator.migrate(
        # One row per key of a job: a second upload of the same key replaces it.
        migrator.add_index("artifact", ("job_id", "key"), unique=True),
        migrator.add_index("checkpoint", ("job_id", "name"), unique=True),
        migrator.add_index("checkpoint", ("job_id", "step")),
    )


def leader_lease(database: pw.Database) -> None:
    # One row (id 1) once an orchestrator on PostgreSQL has claimed leadership; see
    # storage/leadership.py. Times are seconds since the epoch by the database's clock.
    class LeaderLease(pw.Model):
        id = pw.IntegerField(primary_key=True)
        term = pw.BigIntegerField()
        holder = pw.CharField(max_length=128)
        advertise_url = pw.TextField(null=True)
        expires_at = pw.DoubleField()

        class Meta:
            table_name = "leader_lease"

    LeaderLease._meta.set_database(database)
    LeaderLease.create_table(safe=False)


def worker_agent_name(database: pw.Database) -> None:
    """The name the agent registered with, shown beside the administrator's (issue 11)."""
    migrator = SchemaMigrator.from_database(database)
    migrator.migrate(migrator.add_column("worker", "agent_name", pw.TextField(null=True)))


def drop_covered_attempt_index(database: pw.Database) -> None:
    """job_attempt's index on job_id alone: the unique (job_id, number) one serves every
    lookup by job (and the job's ON DELETE CASCADE) as well, and each index is one more
    page written by every commit that adds an attempt, a placed submission's included
    (issue 14). Older releases read and write the table the same without it."""
    database.execute_sql('DROP INDEX IF EXISTS "job_attempt_job_id"')


def job_local_unisolated(database: pw.Database) -> None:
    """Whether a job's submitter controls the orchestrator, so that a local run may be as
    its own user (issue 28). NULL, older jobs: isolated, as they were submitted."""
    migrator = SchemaMigrator.from_database(database)
    migrator.migrate(migrator.add_column("job", "local_unisolated", pw.BooleanField(null=True)))


# Frozen: what migration 10 creates and hands every existing token and job to.
FIRST_ADMIN_USER = "admin"
FIRST_TEAM = "default"
# Every permission of releases 8 and 9 (migration 9 added none).
_RELEASE_8_PERMISSIONS = frozenset(
    {"admin.workers", "queue.submit", "queue.admin", "audit.read", "queue.command", "queue.local"}
)
_RELEASE_10_NEW_PERMISSIONS = ("admin.users", "queue.approve", "usage.read")


def users_and_teams(database: pw.Database) -> None:
    """Users, teams and memberships (issue 24). The user `admin` (role admin) in the team
    `default` receives every existing API token and job, so nothing changes hands and a
    single-user install goes on as before; tokens that held every permission of release 8
    (and 9) gain the three new ones, as migration 4 did for its two."""

    class User(pw.Model):
        id = pw.AutoField()
        name = pw.CharField(max_length=64, unique=True)
        role = pw.CharField(max_length=16)
        grants = pw.TextField(default="[]")
        disabled = pw.BooleanField(default=False)
        password_hash = pw.TextField(null=True)
        created_at = pw.DoubleField()
        updated_at = pw.DoubleField()

        class Meta:
            table_name = "app_user"

    class Team(pw.Model):
        id = pw.AutoField()
        name = pw.CharField(max_length=64, unique=True)
        created_at = pw.DoubleField()

        class Meta:
            table_name = "team"

    class TeamMember(pw.Model):
        id = pw.AutoField()
        team = pw.ForeignKeyField(Team, on_delete="CASCADE", column_name="team_id")
        user = pw.ForeignKeyField(User, on_delete="CASCADE", column_name="user_id", index=False)
        is_default = pw.BooleanField(default=False)
        created_at = pw.DoubleField()

        class Meta:
            table_name = "team_member"
            indexes = ((("user", "team"), True),)

    models = (User, Team, TeamMember)
    for model in models:
        model._meta.set_database(database)
    database.create_tables(models, safe=False)
    migrator = SchemaMigrator.from_database(database)
    migrator.migrate(
        migrator.add_column("api_token", "user_id", pw.IntegerField(null=True)),
        migrator.add_column("job", "user_name", pw.TextField(null=True)),
        migrator.add_column("job", "team_name", pw.TextField(null=True)),
        migrator.add_index("api_token", ("user_id",)),
        # A person's list of jobs, and a team's, newest first.
        migrator.add_index("job", ("user_name", "seq")),
        migrator.add_index("job", ("team_name", "seq")),
    )
    now = time.time()
    admin_id = User.insert(
        name=FIRST_ADMIN_USER, role="admin", created_at=now, updated_at=now
    ).execute()
    team_id = Team.insert(name=FIRST_TEAM, created_at=now).execute()
    TeamMember.insert(team=team_id, user=admin_id, is_default=True, created_at=now).execute()
    tokens = pw.Table("api_token").bind(database)
    tokens.update(user_id=admin_id).execute()
    jobs = pw.Table("job").bind(database)
    jobs.update(user_name=FIRST_ADMIN_USER, team_name=FIRST_TEAM).execute()
    token_id, permissions = tokens.c.id, tokens.c.permissions
    for row in list(tokens.select(token_id, permissions).dicts()):
        held = json.loads(row["permissions"] or "[]")
        if set(held) >= _RELEASE_8_PERMISSIONS:
            added = held + [p for p in _RELEASE_10_NEW_PERMISSIONS if p not in held]
            text = json.dumps(added, separators=(",", ":"))
            tokens.update(permissions=text).where(token_id == row["id"]).execute()


def attempt_log_quota(database: pw.Database) -> None:
    """Each attempt's stored log bytes and the lines dropped past its quota (issue 23).
    Attempts from before count from zero: their lines are not summed again."""
    migrator = SchemaMigrator.from_database(database)
    migrator.migrate(
        migrator.add_column("job_attempt", "log_bytes", pw.BigIntegerField(default=0)),
        migrator.add_column("job_attempt", "log_lines_dropped", pw.BigIntegerField(default=0)),
    )


def team_budgets(database: pw.Database) -> None:
    """Teams' GPU-hour budgets, and attempts found by their end (issue 24). A frozen
    copy of the model as it was at 12."""

    class TeamBudget(pw.Model):
        id = pw.AutoField()
        team_name = pw.CharField(max_length=64, unique=True)
        gpu_hours = pw.DoubleField()
        period = pw.CharField(max_length=8)
        action = pw.CharField(max_length=8)
        updated_at = pw.DoubleField()

        class Meta:
            table_name = "team_budget"

    TeamBudget._meta.set_database(database)
    database.create_tables([TeamBudget], safe=False)
    # Usage and every submit to a team with a budget read the attempts that ended after
    # a time (or have not ended): without this, each would read every attempt ever made.
    migrator = SchemaMigrator.from_database(database)
    migrator.migrate(migrator.add_index("job_attempt", ("ended_at",)))


def concurrency_limits(database: pw.Database) -> None:
    """Concurrency limits (issue 24): the fleet's in one settings row, a team's on the
    team. Every database starts unlimited, as before."""

    class ConcurrencySetting(pw.Model):
        id = pw.IntegerField(primary_key=True)
        max_concurrent = pw.IntegerField(null=True)
        user_max_concurrent = pw.IntegerField(null=True)
        updated_at = pw.DoubleField()

        class Meta:
            table_name = "concurrency_setting"

    ConcurrencySetting._meta.set_database(database)
    database.create_tables([ConcurrencySetting], safe=False)
    migrator = SchemaMigrator.from_database(database)
    migrator.migrate(
        migrator.add_column("team", "max_jobs", pw.IntegerField(null=True)),
        migrator.add_column("team", "max_gpus", pw.IntegerField(null=True)),
    )


def approval_rules(database: pw.Database) -> None:
    """Admin-defined approval rules, evaluated at submit in id order (issue 24)."""

    class ApprovalRule(pw.Model):
        id = pw.AutoField()
        condition = pw.CharField(max_length=32)
        threshold = pw.TextField(default="")
        exempt_roles = pw.TextField(default="[]")
        enabled = pw.BooleanField(default=True)
        created_at = pw.DoubleField()

        class Meta:
            table_name = "approval_rule"

    ApprovalRule._meta.set_database(database)
    database.create_tables([ApprovalRule], safe=False)


def team_quotas(database: pw.Database) -> None:
    """Team GPU quotas, fair-share weights and borrowing limits (issue 25). A frozen
    copy of the model as it was at 15; no row: no quota, weight 1, borrowing unlimited."""

    class TeamQuotaRow(pw.Model):
        id = pw.AutoField()
        team_name = pw.CharField(max_length=64, unique=True)
        gpus = pw.IntegerField(null=True)
        flavors = pw.TextField(default="{}")
        weight = pw.DoubleField(default=1.0)
        borrow_limit = pw.IntegerField(null=True)
        updated_at = pw.DoubleField()

        class Meta:
            table_name = "team_quota"

    TeamQuotaRow._meta.set_database(database)
    database.create_tables([TeamQuotaRow], safe=False)


# Tokens that held every permission of releases 14 and 15 gain admin.webhooks (as migration 4 and
# 10 did for theirs). Frozen: the permissions of that release.
_RELEASE_14_PERMISSIONS = frozenset(
    {
        "admin.workers",
        "queue.submit",
        "queue.admin",
        "audit.read",
        "queue.command",
        "queue.local",
        "admin.users",
        "queue.approve",
        "usage.read",
    }
)


def webhooks(database: pw.Database) -> None:
    """Webhook subscriptions, the outbox of events, deliveries and their attempts (issue
    27). A frozen copy of the models as they were at 16."""

    class WebhookSubscription(pw.Model):
        id = pw.AutoField()
        url = pw.TextField()
        secret = pw.TextField()
        events = pw.TextField(default="[]")
        team_name = pw.TextField(null=True)
        user_name = pw.TextField(null=True)
        worker_labels = pw.TextField(default="{}")
        format = pw.CharField(max_length=8, default="json")
        owner = pw.TextField(null=True)
        created_by = pw.TextField()
        created_at = pw.DoubleField()
        disabled_at = pw.DoubleField(null=True)
        disabled_reason = pw.TextField(null=True)

        class Meta:
            table_name = "webhook_subscription"

    class WebhookEvent(pw.Model):
        id = pw.BigAutoField()
        event_id = pw.CharField(max_length=64, unique=True)
        kind = pw.CharField(max_length=32)
        body = pw.TextField()
        created_at = pw.DoubleField()

        class Meta:
            table_name = "webhook_event"

    class WebhookDelivery(pw.Model):
        id = pw.BigAutoField()
        delivery_id = pw.CharField(max_length=64, unique=True)
        event = pw.BigIntegerField(column_name="event_id")
        subscription = pw.IntegerField(column_name="subscription_id")
        state = pw.CharField(max_length=16, default="pending")
        attempts = pw.IntegerField(default=0)
        next_at = pw.DoubleField()
        created_at = pw.DoubleField()
        last_status = pw.IntegerField(null=True)
        last_error = pw.TextField(null=True)
        last_latency_ms = pw.DoubleField(null=True)
        delivered_at = pw.DoubleField(null=True)

        class Meta:
            table_name = "webhook_delivery"
            # The sender's page of due deliveries; a subscription's delivery log.
            indexes = ((("state", "next_at"), False), (("subscription", "id"), False))

    class WebhookAttempt(pw.Model):
        id = pw.BigAutoField()
        delivery = pw.BigIntegerField(column_name="delivery_id", index=True)
        at = pw.DoubleField()
        status_code = pw.IntegerField(null=True)
        latency_ms = pw.DoubleField()
        error = pw.TextField(null=True)

        class Meta:
            table_name = "webhook_attempt"

    models = (WebhookSubscription, WebhookEvent, WebhookDelivery, WebhookAttempt)
    for model in models:
        model._meta.set_database(database)
    database.create_tables(models, safe=False)
    tokens = pw.Table("api_token").bind(database)
    token_id, permissions = tokens.c.id, tokens.c.permissions
    for row in list(tokens.select(token_id, permissions).dicts()):
        held = json.loads(row["permissions"] or "[]")
        if set(held) >= _RELEASE_14_PERMISSIONS and "admin.webhooks" not in held:
            text = json.dumps([*held, "admin.webhooks"], separators=(",", ":"))
            tokens.update(permissions=text).where(token_id == row["id"]).execute()


def failure_kinds_and_quarantine(database: pw.Database) -> None:
    """Each attempt end's kind and signature; a worker's quarantine (issue 26). Attempts
    and workers from before have none. (Written as 15 on its branch; 17 once merged after
    the team quotas' 15 and the webhooks' 16.)"""
    migrator = SchemaMigrator.from_database(database)
    migrator.migrate(
        migrator.add_column("job_attempt", "kind", pw.CharField(max_length=16, null=True)),
        migrator.add_column("job_attempt", "signature", pw.TextField(null=True)),
        migrator.add_column("worker", "quarantine_reason", pw.TextField(null=True)),
        migrator.add_column("worker", "quarantined_at", pw.DoubleField(null=True)),
    )
