"""The webhook signature: ``X-Tunefleet-Signature: t=<unix>,v1=<hex>``, where ``<hex>`` is
the HMAC-SHA256 of ``"<t>.<body>"`` under the subscription's secret (Stripe's scheme: the
timestamp is signed, so a captured delivery cannot be replayed later unnoticed)."""

from __future__ import annotations

import hashlib
import hmac
import secrets

SIGNATURE_HEADER = "X-Tunefleet-Signature"
EVENT_HEADER = "X-Tunefleet-Event"
DELIVERY_HEADER = "X-Tunefleet-Delivery"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(secret: str, header: str, body: bytes, now: float, tolerance_s: float = 300) -> bool:
    """What a receiver runs (docs/webhooks.md has it in five lines)."""
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    expected = signature(secret, timestamp, body).split("v1=", 1)[1]
    fresh = abs(now - timestamp) <= tolerance_s
    return fresh and hmac.compare_digest(expected, parts.get("v1", ""))


def masked(secret: str) -> str:
    """What logs, audit and the API show of a secret after its creation."""
    return f"{secret[: len(SECRET_PREFIX) + 2]}…{secret[-2:]}" if len(secret) > 12 else "…"
