"""Response models of the people-facing artifact endpoints (docs/api.md, "Artifacts")."""

from __future__ import annotations

from tunefleet.http.schemas_common import RequestModel, ResponseModel


class ArtifactView(ResponseModel):
    key: str
    size: int
    sha256: str | None
    attempt: int
    created_at: str | None


class CheckpointView(ResponseModel):
    name: str
    step: int
    attempt: int
    bytes: int
    created_at: str | None


class ArtifactListResponse(ResponseModel):
    job_id: str
    artifacts: list[ArtifactView]
    checkpoints: list[CheckpointView]


class DeleteArtifactsResponse(ResponseModel):
    job_id: str
    deleted: int


class DownloadArtifactQuery(RequestModel):
    """``?redirect=false`` answers where to fetch the object, as JSON, instead of sending
    it or redirecting to it (for a browser page, which cannot follow a redirect to a
    bucket): ``{"key", "size", "sha256", "url", "presigned", "expires_in"}``."""

    redirect: bool = True
