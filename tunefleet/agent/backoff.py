"""Capped exponential backoff with jitter, for reconnecting and re-sending reports.

Jitter spreads out a fleet of agents that all lost the orchestrator at the same moment,
so they do not all knock on its door again in the same second when it comes back.
"""

from __future__ import annotations

import random


class Backoff:
    """Delays of ``base_s * factor**n`` capped at ``max_s``, each shortened by a random
    fraction of up to ``jitter`` (0.5: a delay lies in [ceiling / 2, ceiling]).

    ``next_delay()`` returns the delay for the next attempt and counts it; ``reset()``
    starts over after a success.
    """

    def __init__(
        self,
        base_s: float = 1.0,
        max_s: float = 60.0,
        factor: float = 2.0,
        rng: random.Random | None = None,
        *,
        jitter: float = 0.5,
    ) -> None:
        if base_s <= 0:
            raise ValueError(f"backoff base must be positive, got {base_s}")
        if max_s < base_s:
            raise ValueError(f"backoff maximum {max_s} is below its base {base_s}")
        if factor < 1:
            raise ValueError(f"backoff factor must be at least 1, got {factor}")
        if not 0 <= jitter <= 1:
            raise ValueError(f"backoff jitter must be between 0 and 1, got {jitter}")
        self.base_s = base_s
        self.max_s = max_s
        self.factor = factor
        self.jitter = jitter
        self.attempts = 0
        self._rng = rng if rng is not None else random.Random()
        self._ceiling = base_s

    @property
    def ceiling_s(self) -> float:
        """The largest delay the next attempt can get."""
        return self._ceiling

    def next_delay(self) -> float:
        ceiling = self._ceiling
        self.attempts += 1
        # Grown step by step rather than as factor**attempts, which overflows a float
        # after a day of retries.
        self._ceiling = min(self.max_s, ceiling * self.factor)
        return ceiling * (1.0 - self.jitter * self._rng.random())

    def reset(self) -> None:
        self.attempts = 0
        self._ceiling = self.base_s
