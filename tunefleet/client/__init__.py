"""tunefleet's Python client: submit, wait for, read and download jobs from a script,
a notebook or a pipeline (docs/client.md).

    from tunefleet.client import Client

    with Client() as tf:  # TUNEFLEET_URL and TUNEFLEET_TOKEN, as for the command line
        job_id = tf.submit("tiny-example")["job_id"]
        job = tf.wait(job_id, timeout_s=3600, check=True)
        tf.download(job_id, "model.json", to="out")
"""

from tunefleet.client.connection import DEFAULT_URL, Connection
from tunefleet.client.errors import (
    ApiError,
    BadRequest,
    ChecksumMismatch,
    ClientError,
    Conflict,
    Forbidden,
    InsufficientStorage,
    JobFailed,
    NotFound,
    NotTheOrchestrator,
    ServerError,
    SettingsError,
    StreamFailed,
    TlsFailure,
    TooManyRequests,
    Unauthorized,
    Unavailable,
    Unreachable,
    WaitTimeout,
)
from tunefleet.client.local_config import LocalConfigError
from tunefleet.client.sync import Client
from tunefleet.client.types import (
    Artifact,
    Artifacts,
    Attempt,
    Cancelled,
    Checkpoint,
    Downloaded,
    Job,
    JobPage,
    JobStatus,
    LogLine,
    MetricPoint,
    Submitted,
    Worker,
)

__all__ = [
    "DEFAULT_URL",
    "ApiError",
    "Artifact",
    "Artifacts",
    "Attempt",
    "BadRequest",
    "Cancelled",
    "Checkpoint",
    "ChecksumMismatch",
    "Client",
    "ClientError",
    "Conflict",
    "Connection",
    "Downloaded",
    "Forbidden",
    "InsufficientStorage",
    "Job",
    "JobFailed",
    "JobPage",
    "JobStatus",
    "LocalConfigError",
    "LogLine",
    "MetricPoint",
    "NotFound",
    "NotTheOrchestrator",
    "ServerError",
    "SettingsError",
    "StreamFailed",
    "Submitted",
    "TlsFailure",
    "TooManyRequests",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
    "WaitTimeout",
    "Worker",
]
