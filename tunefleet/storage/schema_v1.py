"""Frozen copy of the schema as migration 1 created it.

Never edit this to follow models.py: a migration must build the same tables forever, so
databases created by any release upgrade the same way. Changes go in a new migration.
JSON columns are plain TEXT here (models.JsonField stores TEXT too).
"""

from __future__ import annotations

import peewee as pw


def v1_models(database: pw.Database) -> list[type[pw.Model]]:
    """The version-1 tables as throwaway model classes bound to `database`."""

    class Base(pw.Model):
        class Meta:
            legacy_table_names = False

    Base._meta.set_database(database)

    class SchemaVersion(Base):
        version = pw.IntegerField(primary_key=True)
        description = pw.TextField()
        applied_at = pw.DoubleField()

        class Meta:
            table_name = "schema_version"

    class Worker(Base):
        id = pw.CharField(max_length=64, primary_key=True)
        name = pw.TextField()
        worker_type = pw.CharField(max_length=16)
        state = pw.CharField(max_length=16)
        drain_requested = pw.BooleanField(default=False)
        is_local = pw.BooleanField(default=False)
        labels = pw.TextField(default="{}")
        agent_labels = pw.TextField(default="{}")
        gpu_info = pw.TextField(default="{}")
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
        gpu_utilization = pw.TextField(default="[]")
        vram_used_gb = pw.TextField(default="[]")
        last_heartbeat_at = pw.DoubleField(null=True)
        connected_at = pw.DoubleField(null=True)
        last_seen_at = pw.DoubleField(null=True)
        created_at = pw.DoubleField()
        updated_at = pw.DoubleField()

        class Meta:
            table_name = "worker"

    class WorkerToken(Base):
        worker = pw.ForeignKeyField(Worker, on_delete="CASCADE", column_name="worker_id")
        token_hash = pw.CharField(max_length=128, unique=True)
        created_at = pw.DoubleField()
        revoked_at = pw.DoubleField(null=True)

        class Meta:
            table_name = "worker_token"

    class ApiToken(Base):
        name = pw.TextField()
        token_hash = pw.CharField(max_length=128, unique=True)
        permissions = pw.TextField(default="[]")
        created_at = pw.DoubleField()
        last_used_at = pw.DoubleField(null=True)
        revoked_at = pw.DoubleField(null=True)

        class Meta:
            table_name = "api_token"

    class Job(Base):
        id = pw.CharField(max_length=64, primary_key=True)
        seq = pw.IntegerField(unique=True)
        name = pw.TextField(null=True)
        config_name = pw.TextField(null=True)
        config = pw.TextField(default="{}")
        dataloader = pw.TextField(null=True)
        command = pw.TextField(null=True)
        env = pw.TextField(default="{}")
        target = pw.CharField(max_length=16, default="auto")
        worker_labels = pw.TextField(default="{}")
        gpu_count = pw.IntegerField(default=1)
        min_vram_gb = pw.DoubleField(null=True)
        gpu_name = pw.TextField(null=True)
        priority = pw.IntegerField(default=0)
        max_retries = pw.IntegerField(default=3)
        attempts = pw.IntegerField(default=0)
        timeout_minutes = pw.DoubleField(null=True)
        state = pw.CharField(max_length=16, default="pending")
        worker_id = pw.CharField(max_length=64, null=True)
        submitted_by = pw.TextField(null=True)
        submitted_at = pw.DoubleField()
        dispatched_at = pw.DoubleField(null=True)
        started_at = pw.DoubleField(null=True)
        finished_at = pw.DoubleField(null=True)
        progress = pw.TextField(null=True)
        error = pw.TextField(null=True)
        wait_reason = pw.TextField(null=True)
        updated_at = pw.DoubleField()

        class Meta:
            table_name = "job"

    class JobAttempt(Base):
        job = pw.ForeignKeyField(Job, on_delete="CASCADE", column_name="job_id")
        number = pw.IntegerField()
        worker_id = pw.CharField(max_length=64, null=True)
        dispatched_at = pw.DoubleField()
        started_at = pw.DoubleField(null=True)
        ended_at = pw.DoubleField(null=True)
        outcome = pw.CharField(max_length=16, null=True)
        reason = pw.TextField(null=True)

        class Meta:
            table_name = "job_attempt"
            indexes = ((("job", "number"), True),)

    class JobEvent(Base):
        id = pw.BigAutoField()
        job = pw.ForeignKeyField(Job, on_delete="CASCADE", column_name="job_id")
        at = pw.DoubleField()
        kind = pw.CharField(max_length=32)
        worker_id = pw.CharField(max_length=64, null=True)
        attempt = pw.IntegerField(null=True)
        detail = pw.TextField(default="{}")

        class Meta:
            table_name = "job_event"

    class AuditEvent(Base):
        id = pw.BigAutoField()
        at = pw.DoubleField()
        kind = pw.CharField(max_length=64)
        actor = pw.TextField(null=True)
        client_address = pw.TextField(null=True)
        target = pw.TextField(null=True)
        outcome = pw.CharField(max_length=16)
        detail = pw.TextField(default="{}")
        prev_hash = pw.CharField(max_length=64)
        hash = pw.CharField(max_length=64)

        class Meta:
            table_name = "audit_event"

    return [SchemaVersion, Worker, WorkerToken, ApiToken, Job, JobAttempt, JobEvent, AuditEvent]
