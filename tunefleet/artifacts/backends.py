"""Opening the artifact store `--artifact-store` names."""

from __future__ import annotations

from pathlib import Path

from tunefleet.artifacts.local import LocalStore
from tunefleet.artifacts.store import ArtifactStore
from tunefleet.errors import TunefleetError


class StoreSpecError(TunefleetError):
    """A --artifact-store value this orchestrator cannot open (the message says why)."""


def open_store(spec: str | None, data_dir: Path, endpoint_url: str | None = None) -> ArtifactStore:
    """None: <data_dir>/artifacts. ``s3://bucket/prefix``: that bucket. A path (or
    ``file://`` URL): a directory there."""
    if not spec:
        return LocalStore(data_dir / "artifacts")
    if spec.startswith("s3://"):
        bucket, _, prefix = spec.removeprefix("s3://").partition("/")
        if not bucket:
            raise StoreSpecError("--artifact-store s3:// needs a bucket: s3://bucket/prefix")
        try:
            from tunefleet.artifacts.bucket import BucketStore
        except ImportError:
            raise StoreSpecError(
                "--artifact-store s3:// needs boto3: pip install 'tunefleet[s3]'"
            ) from None
        return BucketStore(bucket, prefix.strip("/"), endpoint_url)
    if "://" in spec and not spec.startswith("file://"):
        raise StoreSpecError(
            f"--artifact-store {spec.split('://')[0]}:// is not supported; "
            "use s3://bucket/prefix or a directory"
        )
    return LocalStore(Path(spec.removeprefix("file://")))
