"""The GPU health rules (tunefleet/gpu_health.py) by example and by property: unknown is
never a problem, a problem never makes things better, and the reason is one line that
names the worst finding."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunefleet.gpu_health import (
    CRITICAL_XIDS,
    HEALTHY,
    TEMPERATURE_DEGRADED_C,
    TEMPERATURE_UNHEALTHY_C,
    THROTTLE_REASONS,
    GpuReading,
    HealthLevel,
    HealthSample,
    assess,
)

U, D, H = HealthLevel.UNHEALTHY, HealthLevel.DEGRADED, HealthLevel.HEALTHY
RANK = {H: 0, D: 1, U: 2}


def one(**fields: object) -> HealthSample:
    return HealthSample(gpus=(GpuReading(index=1, **fields),), missing=(), registered=2)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sample", "level", "reason"),
    [
        (None, H, None),
        (HealthSample(), H, None),
        (one(), H, None),  # all unknown
        (one(xids=(79,)), U, "Xid 79 on GPU 1"),
        (one(xids=(48, 94)), U, "Xid 48 on GPU 1 (and 1 more)"),
        (one(xids=(13,)), D, "Xid 13 on GPU 1"),
        (one(xids=(13, 79)), U, "Xid 79 on GPU 1"),
        (one(ecc_uncorrectable=0), H, None),
        (one(ecc_uncorrectable=1), U, "1 uncorrectable ECC error on GPU 1"),
        (one(ecc_uncorrectable=5), U, "5 uncorrectable ECC errors on GPU 1"),
        (one(remapping_failed=True), U, "row remapping failed on GPU 1"),
        (one(retired_pages_pending=True), D, "GPU 1 has retired pages pending a reset"),
        (one(remapped_rows_pending=True), D, "GPU 1 has remapped rows pending a reset"),
        (one(throttle_reasons=("sw_power_cap",)), H, None),
        (one(throttle_reasons=("hw_thermal", "sw_thermal")), D, "GPU 1 throttled (thermal)"),
        (
            one(throttle_reasons=("hw_power_brake", "hw_slowdown")),
            D,
            "GPU 1 throttled (hardware slowdown, power brake)",
        ),
        (one(temperature_c=TEMPERATURE_DEGRADED_C - 1), H, None),
        (one(temperature_c=TEMPERATURE_DEGRADED_C), D, f"GPU 1 at {TEMPERATURE_DEGRADED_C} °C"),
        (one(temperature_c=TEMPERATURE_UNHEALTHY_C), U, f"GPU 1 at {TEMPERATURE_UNHEALTHY_C} °C"),
        (HealthSample(missing=("GPU-b",)), U, "GPU-b missing since registration"),
        (HealthSample(missing=("#3",)), U, "GPU 3 missing since registration"),
        (HealthSample(missing=("GPU-b", "GPU-c")), U, "2 GPUs missing since registration"),
        (HealthSample(missing=None), H, None),
    ],
)
def test_examples(sample: HealthSample | None, level: HealthLevel, reason: str | None) -> None:
    verdict = assess(sample)
    assert (verdict.level, verdict.reason) == (level, reason)
    assert verdict.takes_jobs == (level != U)


maybe_bool = st.one_of(st.none(), st.booleans())
readings = st.builds(
    GpuReading,
    index=st.integers(0, 7),
    uuid=st.one_of(st.none(), st.text(max_size=8)),
    ecc_uncorrectable=st.one_of(st.none(), st.integers(0, 10)),
    retired_pages_pending=maybe_bool,
    remapped_rows_pending=maybe_bool,
    remapping_failed=maybe_bool,
    throttle_reasons=st.one_of(
        st.none(), st.lists(st.sampled_from(sorted(THROTTLE_REASONS)), max_size=3).map(tuple)
    ),
    temperature_c=st.one_of(st.none(), st.floats(0, 120)),
    xids=st.one_of(
        st.none(),
        st.lists(st.sampled_from([13, 31, 43, *sorted(CRITICAL_XIDS)]), max_size=3).map(tuple),
    ),
)
samples = st.builds(
    HealthSample,
    gpus=st.lists(readings, max_size=4).map(tuple),
    missing=st.one_of(st.none(), st.lists(st.text(min_size=1, max_size=6), max_size=2).map(tuple)),
    registered=st.one_of(st.none(), st.integers(0, 8)),
)


def _forget(reading: GpuReading) -> GpuReading:
    return GpuReading(index=reading.index, uuid=reading.uuid)


@given(samples)
def test_a_reason_is_one_line_exactly_when_something_is_wrong(sample: HealthSample) -> None:
    verdict = assess(sample)
    assert (verdict.reason is None) == (verdict.level == H)
    if verdict.reason is not None:
        assert "\n" not in verdict.reason and verdict.reason.startswith(verdict.problems[0])


@given(samples)
def test_unknown_is_never_a_problem(sample: HealthSample) -> None:
    unknown = HealthSample(gpus=tuple(_forget(g) for g in sample.gpus), missing=None)
    assert assess(unknown) == HEALTHY


@given(samples, st.integers(0, 7), st.sampled_from(sorted(CRITICAL_XIDS)))
def test_a_critical_xid_always_makes_the_machine_unhealthy_naming_it(
    sample: HealthSample, index: int, xid: int
) -> None:
    worse = replace(sample, gpus=(*sample.gpus, GpuReading(index=index, xids=(xid,))))
    verdict = assess(worse)
    assert verdict.level == U
    assert f"Xid {xid} on GPU {index}" in verdict.problems


@given(samples, samples)
def test_more_findings_never_make_the_level_better(a: HealthSample, b: HealthSample) -> None:
    both = HealthSample(gpus=a.gpus + b.gpus, missing=(a.missing or ()) + (b.missing or ()))
    assert RANK[assess(both).level] >= max(RANK[assess(a).level], RANK[assess(b).level])
