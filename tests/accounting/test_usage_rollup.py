"""The rolled-up usage is the sum of the attempts' GPU-seconds, exactly (issue 24, item 6)."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from tunefleet.usage import (
    AttemptSpan,
    attempt_gpu_ms,
    attempt_gpu_seconds,
    day_pieces,
    roll_up,
)

DAY = 86_400.0
T0 = 1_790_000_000.0  # a Tuesday, 2026-09-22 13:33:20 UTC
NOW = T0 + 5 * DAY

times = st.floats(min_value=T0, max_value=NOW, allow_nan=False)


@st.composite
def spans(draw: st.DrawFn) -> AttemptSpan:
    start = draw(times)
    running = draw(st.booleans())
    end = None if running else draw(st.floats(min_value=start, max_value=NOW + DAY))
    return AttemptSpan(
        job_id=draw(st.sampled_from(["j1", "j2", "j3"])),
        attempt=draw(st.integers(1, 4)),
        user=draw(st.sampled_from(["alice", "bob", None])),
        team=draw(st.sampled_from(["ml", "vision", None])),
        gpus=draw(st.integers(0, 8)),
        dispatched_at=start,
        ended_at=end,
    )


@given(st.lists(spans(), max_size=20), st.sampled_from(["user", "team"]))
def test_rolled_up_usage_equals_the_sum_of_the_attempts(
    attempts: list[AttemptSpan], by: str
) -> None:
    rows = roll_up(attempts, by, NOW)  # type: ignore[arg-type]
    assert sum(r.gpu_ms for r in rows) == sum(attempt_gpu_ms(a, NOW) for a in attempts)
    for key in {r.key for r in rows}:
        theirs = [a for a in attempts if ((a.user if by == "user" else a.team) or "-") == key]
        assert sum(r.gpu_ms for r in rows if r.key == key) == sum(
            attempt_gpu_ms(a, NOW) for a in theirs
        )


@given(st.lists(spans(), max_size=20), times, times)
def test_windows_split_usage_without_losing_any(
    attempts: list[AttemptSpan], a: float, b: float
) -> None:
    cut = min(a, b)
    before = roll_up(attempts, "team", NOW, until=cut)
    after = roll_up(attempts, "team", NOW, since=cut)
    total = sum(attempt_gpu_ms(s, NOW) for s in attempts)
    assert sum(r.gpu_ms for r in before) + sum(r.gpu_ms for r in after) == total
    assert all(r.day <= dt.datetime.fromtimestamp(cut, dt.UTC).date() for r in before)


def test_an_attempt_spanning_midnight_is_split_at_utc_midnight() -> None:
    midnight = dt.datetime(2026, 9, 23, tzinfo=dt.UTC).timestamp()
    span = AttemptSpan(
        "j",
        1,
        "alice",
        "ml",
        2,
        midnight - 600,
        midnight + 1800,
    )
    assert day_pieces(span, NOW) == [
        (dt.date(2026, 9, 22), 2 * 600_000),
        (dt.date(2026, 9, 23), 2 * 1_800_000),
    ]
    assert attempt_gpu_seconds(span, NOW) == 2 * 2400


def test_a_running_attempt_counts_up_to_now_and_a_cpu_job_counts_nothing() -> None:
    running = AttemptSpan("j", 1, "alice", "ml", 4, NOW - 100, None)
    assert attempt_gpu_seconds(running, NOW) == 400
    cpu = AttemptSpan("j", 2, "alice", "ml", 0, NOW - 100, NOW)
    assert attempt_gpu_seconds(cpu, NOW) == 0
    assert roll_up([cpu], "user", NOW) == []


def test_a_failed_attempt_counts_what_it_burned() -> None:
    failed = AttemptSpan("j", 1, "bob", "vision", 1, NOW - 60, NOW - 30)
    (row,) = roll_up([failed], "user", NOW)
    assert (row.key, row.gpu_seconds, row.attempts) == ("bob", 30, 1)
