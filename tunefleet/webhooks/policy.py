"""When to try a delivery again, and what an answer means: pure functions."""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

FIRST_RETRY_S: Final = 10.0
MAX_RETRY_S: Final = 3600.0
# A delivery not made within this long after its event is given up (state "failed").
GIVE_UP_AFTER_S: Final = 24 * 3600.0
REQUEST_TIMEOUT_S: Final = 10.0
MAX_IN_FLIGHT: Final = 16
PAGE: Final = 64
# Finished deliveries (and their log) are kept this long, then forgotten, a page at a time.
KEEP_LOG_S: Final = 30 * 24 * 3600.0
PRUNE_EVERY_S: Final = 3600.0
PRUNE_PAGE: Final = 1000


class DeliveryState(StrEnum):
    """A delivery's own state (not a job's, though two words are the same)."""

    PENDING = "pending"  # to be tried (again) at next_at
    DELIVERED = "delivered"
    FAILED = "failed"  # given up: 24 h of failures, or the subscription disabled


def retry_delay(attempts: int, rng: random.Random) -> float:
    """Seconds before attempt ``attempts + 1``: doubling from FIRST_RETRY_S up to
    MAX_RETRY_S, with full jitter on the upper half so a receiver that comes back is not
    hit by every delivery at once."""
    ceiling = min(MAX_RETRY_S, FIRST_RETRY_S * 2 ** max(0, attempts - 1))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


@dataclass(frozen=True, slots=True)
class Verdict:
    state: DeliveryState
    next_at: float | None = None
    disable: bool = False  # the receiver answered 410 Gone: the subscription is disabled


def judge(
    status: int | None, attempts: int, created_at: float, now: float, rng: random.Random
) -> Verdict:
    """What an attempt's answer (``status``; None: no answer: refused, timed out) means
    after ``attempts`` attempts of a delivery whose event happened at ``created_at``."""
    if status is not None and 200 <= status < 300:
        return Verdict(DeliveryState.DELIVERED)
    if status == 410:
        return Verdict(DeliveryState.FAILED, disable=True)
    next_at = now + retry_delay(attempts, rng)
    if next_at - created_at > GIVE_UP_AFTER_S:
        return Verdict(DeliveryState.FAILED)
    return Verdict(DeliveryState.PENDING, next_at)
