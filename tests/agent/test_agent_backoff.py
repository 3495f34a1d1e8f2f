"""Backoff: exponential growth, the cap, jitter bounds, reset."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunefleet.agent.backoff import Backoff


class FixedRandom(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


def test_without_jitter_delays_double_up_to_the_cap() -> None:
    backoff = Backoff(1.0, 10.0, 2.0, FixedRandom(0.0))
    assert [backoff.next_delay() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.attempts == 6


def test_jitter_shortens_a_delay_by_at_most_its_fraction() -> None:
    longest = Backoff(2.0, 60.0, 3.0, FixedRandom(0.0), jitter=0.5)
    shortest = Backoff(2.0, 60.0, 3.0, FixedRandom(0.999999), jitter=0.5)
    assert longest.next_delay() == 2.0
    assert shortest.next_delay() == pytest.approx(1.0, abs=1e-5)
    assert longest.next_delay() == 6.0
    assert shortest.next_delay() == pytest.approx(3.0, abs=1e-5)


def test_reset_starts_over() -> None:
    backoff = Backoff(0.5, 8.0, 2.0, FixedRandom(0.0))
    for _ in range(5):
        backoff.next_delay()
    backoff.reset()
    assert backoff.attempts == 0
    assert backoff.ceiling_s == 0.5
    assert backoff.next_delay() == 0.5


def test_a_day_of_retries_does_not_overflow() -> None:
    backoff = Backoff(1.0, 60.0, 10.0, FixedRandom(0.0))
    for _ in range(5_000):
        delay = backoff.next_delay()
    assert delay == 60.0


@given(
    base=st.floats(0.001, 10.0),
    span=st.floats(1.0, 100.0),
    factor=st.floats(1.0, 5.0),
    jitter=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32),
    steps=st.integers(1, 40),
)
def test_every_delay_lies_between_the_jittered_floor_and_the_ceiling(
    base: float, span: float, factor: float, jitter: float, seed: int, steps: int
) -> None:
    cap = base * span
    backoff = Backoff(base, cap, factor, random.Random(seed), jitter=jitter)
    previous_ceiling = 0.0
    for _ in range(steps):
        ceiling = backoff.ceiling_s
        assert previous_ceiling <= ceiling <= cap  # grows, never past the cap
        delay = backoff.next_delay()
        assert ceiling * (1 - jitter) - 1e-9 <= delay <= ceiling
        previous_ceiling = ceiling


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_s": 0.0}, "base must be positive"),
        ({"base_s": 5.0, "max_s": 1.0}, "below its base"),
        ({"factor": 0.5}, "factor must be at least 1"),
        ({"jitter": 1.5}, "jitter must be between"),
    ],
)
def test_bad_parameters_are_refused(kwargs: dict[str, float], message: str) -> None:
    options = {"base_s": 1.0, "max_s": 60.0, "factor": 2.0, "jitter": 0.5, **kwargs}
    with pytest.raises(ValueError, match=message):
        Backoff(options["base_s"], options["max_s"], options["factor"], jitter=options["jitter"])
