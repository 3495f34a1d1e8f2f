"""Webhook wire schemas (issue 27): a subscription, its delivery log."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from tunefleet.http.schemas_common import ResponseModel, StrictRequestModel
from tunefleet.webhooks.policy import DeliveryState

# A signing secret given at creation or rotation: the same bounds both ways.
SigningSecret = Annotated[str | None, Field(min_length=16, max_length=256)]

MAX_EVENTS = 32
MAX_LABELS = 16


class CreateWebhookRequest(StrictRequestModel):
    """POST /api/admin/webhooks."""

    url: str = Field(min_length=1, max_length=2048, description="http(s) URL of the receiver")
    events: list[str] | None = Field(
        default=None,
        max_length=MAX_EVENTS,
        description="Event kinds wanted (docs/webhooks.md); default: every one you may have",
    )
    format: Literal["json", "slack"] = Field(
        default="json", description="json: the event object; slack: a chat message"
    )
    team: str | None = Field(default=None, max_length=64, description="Only this team's jobs")
    user: str | None = Field(default=None, max_length=64, description="Only this user's jobs")
    worker_labels: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_LABELS,
        description="Only events on workers holding all these labels",
    )
    secret: SigningSecret = Field(
        default=None, description="The signing secret; default: one is made (shown once)"
    )


class RotateSecretRequest(StrictRequestModel):
    secret: SigningSecret = Field(
        default=None, description="The new signing secret; default: one is made (shown once)"
    )


class WebhookView(ResponseModel):
    id: int
    url: str
    events: list[str]
    format: str
    team: str | None = None
    user: str | None = None
    worker_labels: dict[str, str] = Field(default_factory=dict)
    owner: str | None = Field(default=None, description="Set for a user's own subscription")
    secret_hint: str = Field(description="The secret, masked")
    created_by: str
    created_at: str | None = None
    enabled: bool
    disabled_at: str | None = None
    disabled_reason: str | None = None
    pending: int | None = None


class WebhookCreated(WebhookView):
    secret: str = Field(description="The signing secret: shown this once only")


class WebhookListResponse(ResponseModel):
    webhooks: list[WebhookView]
    events: list[str] = Field(description="Every event kind a subscription may ask for")


class AttemptView(ResponseModel):
    at: str | None = None
    status_code: int | None = None
    latency_ms: float
    error: str | None = None


class DeliveryView(ResponseModel):
    delivery_id: str
    event_id: str
    event: str
    state: DeliveryState
    attempts: int
    next_attempt_at: str | None = None
    last_status: int | None = None
    last_error: str | None = None
    last_latency_ms: float | None = None
    created_at: str | None = None
    delivered_at: str | None = None
    log: list[AttemptView] = Field(default_factory=list)


class DeliveryListResponse(ResponseModel):
    webhook: WebhookView
    deliveries: list[DeliveryView]


class DeliveryListQuery(StrictRequestModel):
    limit: int = Field(default=50, ge=1, le=500)
    offset: int = Field(default=0, ge=0)


class WebhookActionResponse(ResponseModel):
    success: bool = True
    id: int
    detail: str | None = None
    event_id: str | None = None
    extra: dict[str, Any] | None = None
