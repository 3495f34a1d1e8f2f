"""GPU health: what an agent's NVML sample says about its machine (issue 26, item 4).

Pure rules over plain values, shared by the agent (which builds the sample) and the
orchestrator (which judges it on every heartbeat). A sample maps to one of

- ``healthy``: nothing wrong, or nothing known;
- ``degraded``: something a person should look at, but jobs still run here (shown in the
  API, CLI and UI);
- ``unhealthy``: the machine takes no new job (its current one goes on), with a one-line
  reason such as ``Xid 79 on GPU 1``.

``None`` anywhere means "unknown" (NVML said NotSupported, or failed): unknown is never a
problem by itself. The thresholds are the module's constants; docs/worker.md lists them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class HealthLevel(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNHEALTHY = "unhealthy"


# Xid codes that mean the GPU or its memory failed, not the program on it (NVIDIA's Xid
# catalogue, and what DCGM's health watches treat as failures): 48 double-bit ECC error,
# 61/62 internal micro-controller halt, 63/64 row remapping event/failure, 74 NVLink
# error, 79 fallen off the bus, 92 high single-bit ECC rate, 94/95 contained/uncontained
# ECC error, 119/120 GSP timeout/error, 140 unrecovered ECC error. Any other Xid (13 and
# 31 are mostly a program's own bad memory access, 43 a program stopped) is degraded.
CRITICAL_XIDS = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})
# Uncorrectable (volatile: since the driver loaded) ECC errors that make a GPU unhealthy.
ECC_UNCORRECTABLE_LIMIT = 1
# Core temperature, °C: at or above DEGRADED_C the GPU is shown degraded (most data-centre
# GPUs start slowing down around 85-90 °C); at or above UNHEALTHY_C it takes no job.
TEMPERATURE_DEGRADED_C = 85
TEMPERATURE_UNHEALTHY_C = 95
# Clock throttle reasons (names the agent reports) that mean heat or a power fault. The
# software power cap is left out: a GPU at full load sits at its power cap all the time.
THROTTLE_PROBLEMS = {
    "hw_slowdown": "hardware slowdown",
    "sw_thermal": "thermal",
    "hw_thermal": "thermal",
    "hw_power_brake": "power brake",
}
THROTTLE_REASONS = frozenset({"sw_power_cap", *THROTTLE_PROBLEMS})


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's health fields; None: unknown."""

    index: int
    uuid: str | None = None
    ecc_uncorrectable: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapping_failed: bool | None = None
    throttle_reasons: tuple[str, ...] | None = None
    temperature_c: float | None = None
    # Xid codes seen on this GPU since the agent started; None: the event API is not there.
    xids: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class HealthSample:
    gpus: tuple[GpuReading, ...] = ()
    # UUIDs registered at the agent's start that NVML no longer lists; None: unknown.
    missing: tuple[str, ...] | None = None
    registered: int | None = None  # GPUs the agent registered with


@dataclass(frozen=True, slots=True)
class Health:
    level: HealthLevel = HealthLevel.HEALTHY
    reason: str | None = None  # one line; None when healthy
    problems: tuple[str, ...] = field(default=(), compare=False)

    @property
    def takes_jobs(self) -> bool:
        return self.level != HealthLevel.UNHEALTHY


HEALTHY = Health()


def sample_from_wire(report: Any) -> HealthSample:
    """A heartbeat's ``gpu_health`` as protocol/endpoints.GpuHealthSample read it (its
    attributes are read: a model_dump first would cost as much as the parse)."""
    gpus = tuple(
        GpuReading(
            index=gpu.index,
            uuid=gpu.uuid,
            ecc_uncorrectable=gpu.ecc_uncorrectable,
            retired_pages_pending=gpu.retired_pages_pending,
            remapped_rows_pending=gpu.remapped_rows_pending,
            remapping_failed=gpu.remapping_failed,
            throttle_reasons=_tuple(gpu.throttle_reasons),
            temperature_c=gpu.temperature_c,
            xids=_tuple(gpu.xids),
        )
        for gpu in report.gpus
    )
    return HealthSample(gpus=gpus, missing=_tuple(report.missing), registered=report.registered)


def _tuple(values: Iterable[Any] | None) -> tuple[Any, ...] | None:
    return None if values is None else tuple(values)


def assess(sample: HealthSample | None) -> Health:
    """The worst finding decides the level; the reason is its line, and "(and N more)"."""
    if sample is None:
        return HEALTHY
    # Each finding on one line, whatever the agent put in a UUID.
    unhealthy = [" ".join(p.split()) for p in _unhealthy(sample)]
    degraded = [" ".join(p.split()) for p in _degraded(sample)]
    if unhealthy:
        return Health(HealthLevel.UNHEALTHY, _one_line(unhealthy), tuple(unhealthy + degraded))
    if degraded:
        return Health(HealthLevel.DEGRADED, _one_line(degraded), tuple(degraded))
    return HEALTHY


def _one_line(problems: Sequence[str]) -> str:
    more = len(problems) - 1
    return problems[0] + (f" (and {more} more)" if more else "")


def _unhealthy(sample: HealthSample) -> Iterable[str]:
    for gpu in sample.gpus:
        for xid in sorted(set(gpu.xids or ()) & CRITICAL_XIDS):
            yield f"Xid {xid} on GPU {gpu.index}"
    if sample.missing:
        if len(sample.missing) == 1:
            gone = sample.missing[0]
            name = f"GPU {gone[1:]}" if gone.startswith("#") else gone  # "#index" or a UUID
            yield f"{name} missing since registration"
        else:
            yield f"{len(sample.missing)} GPUs missing since registration"
    for gpu in sample.gpus:
        ecc = gpu.ecc_uncorrectable
        if ecc is not None and ecc >= ECC_UNCORRECTABLE_LIMIT:
            errors = "error" if ecc == 1 else "errors"
            yield f"{ecc} uncorrectable ECC {errors} on GPU {gpu.index}"
        if gpu.remapping_failed:
            yield f"row remapping failed on GPU {gpu.index}"
        if gpu.temperature_c is not None and gpu.temperature_c >= TEMPERATURE_UNHEALTHY_C:
            yield f"GPU {gpu.index} at {gpu.temperature_c:g} °C"


def _degraded(sample: HealthSample) -> Iterable[str]:
    for gpu in sample.gpus:
        for xid in sorted(set(gpu.xids or ()) - CRITICAL_XIDS):
            yield f"Xid {xid} on GPU {gpu.index}"
        if gpu.retired_pages_pending:
            yield f"GPU {gpu.index} has retired pages pending a reset"
        if gpu.remapped_rows_pending:
            yield f"GPU {gpu.index} has remapped rows pending a reset"
        reasons = gpu.throttle_reasons or ()
        kinds = sorted({THROTTLE_PROBLEMS[r] for r in reasons if r in THROTTLE_PROBLEMS})
        if kinds:
            yield f"GPU {gpu.index} throttled ({', '.join(kinds)})"
        hot = gpu.temperature_c
        if hot is not None and TEMPERATURE_DEGRADED_C <= hot < TEMPERATURE_UNHEALTHY_C:
            yield f"GPU {gpu.index} at {hot:g} °C"
