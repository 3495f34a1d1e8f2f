"""GPU discovery through NVML (the `pynvml` module of nvidia-ml-py).

A machine without an NVIDIA driver, without GPUs, or with a GPU that answers some
queries and not others is an ordinary case, not an error: the probe reports what it
can and zero GPUs when it can report nothing. It never raises, because an agent that
cannot see its GPUs must still be able to register and run CPU jobs.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from tunefleet.agent.gpu_health_reader import GpuHealthReader
from tunefleet.gpu_health import HealthSample
from tunefleet.protocol.endpoints import GpuDeviceReport, RegisterRequest, ReportedGpus

log = structlog.get_logger(__name__)

_GIB = 1024**3
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    name: str
    vram_gb: float | None
    uuid: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "vram_gb": self.vram_gb, "uuid": self.uuid}


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """What a machine reports at registration.

    A machine with mixed GPUs reports the first device's `name` and the smallest
    device's `vram_gb`: a job asking for N GB may land on any of them, so the
    promise must hold for every one. `devices` carries the full detail.
    """

    devices: tuple[GpuDevice, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def name(self) -> str | None:
        return self.devices[0].name if self.devices else None

    @property
    def vram_gb(self) -> float | None:
        sizes = [d.vram_gb for d in self.devices if d.vram_gb is not None]
        return min(sizes) if sizes else None

    @property
    def accelerator(self) -> str:
        return "cuda" if self.devices else "cpu"

    def register_fields(self) -> dict[str, Any]:
        """Both spellings of the GPU report: nested `gpu_info` and the seed's flat fields."""
        gpus = ReportedGpus.model_construct(
            name=self.name,
            vram_gb=self.vram_gb,
            count=self.count,
            accelerator=self.accelerator,
            driver=self.driver_version,
            cuda=self.cuda_version,
            devices=[GpuDeviceReport.model_construct(**d.as_dict()) for d in self.devices],
        )
        report = RegisterRequest.model_construct(
            gpu_info=gpus,
            gpu_count=self.count,
            gpu_name=self.name,
            gpu_vram_gb=self.vram_gb,
            accelerator_type=self.accelerator,
        )
        return report.model_dump(exclude_unset=True)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """Per-device load for heartbeats, in device order; empty when unknown. ``health``:
    the GPU health reading (gpu_health_reader.py); None when NVML is not there at all."""

    utilization_pct: list[float]
    memory_used_gb: list[float]
    health: HealthSample | None = None


def cuda_version_string(version: int) -> str:
    """NVML encodes CUDA 12.4 as 12040 (major * 1000 + minor * 10)."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def _text(value: object) -> str:
    # Older pynvml releases return bytes for names and versions.
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _gib(num_bytes: float) -> float:
    return round(num_bytes / _GIB, 1)


class GpuProbe:
    """Reads the GPUs through an NVML module; `nvml=None` imports pynvml on first use."""

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml
        self._ready: bool | None = None  # None: not tried yet; NVML is initialised once
        self._health: GpuHealthReader | None = None  # set up by the first inventory

    def inventory(self) -> GpuInventory:
        try:
            return self._inventory()
        except Exception as error:  # discovery must never take the agent down
            log.warning("gpu inventory failed", error=repr(error))
            return GpuInventory()

    def sample(self) -> GpuSample:
        try:
            return self._sample()
        except Exception as error:  # a heartbeat must go out regardless
            log.warning("gpu sample failed", error=repr(error))
            return GpuSample([], [])

    def close(self) -> None:
        if self._health is not None:
            self._health.close()
            self._health = None
        if self._ready and self._nvml is not None:
            self._query(self._nvml.nvmlShutdown)
        self._ready = None

    def _init(self) -> bool:
        if self._ready is not None:
            return self._ready
        self._ready = False
        try:
            if self._nvml is None:
                self._nvml = importlib.import_module("pynvml")
            self._nvml.nvmlInit()
        except ImportError as error:
            log.info("no GPUs: pynvml is not installed", error=str(error))
            return False
        except Exception as error:  # NVMLError, OSError: no driver, no GPU
            log.info("no GPUs: NVML did not initialise", error=_text(error))
            return False
        self._ready = True
        return True

    def _nvml_error(self) -> type[BaseException]:
        error_type = getattr(self._nvml, "NVMLError", None)
        if isinstance(error_type, type) and issubclass(error_type, BaseException):
            return error_type
        return OSError

    def _query(self, fn: Callable[..., _T], *args: object) -> _T | None:
        """One NVML call; a failure skips that value (logged at debug) instead of raising."""
        try:
            return fn(*args)
        except (self._nvml_error(), OSError, ValueError, UnicodeError) as error:
            log.debug("nvml query failed", call=getattr(fn, "__name__", "?"), error=_text(error))
            return None

    def _handles(self) -> list[Any]:
        """One handle per device index; None where NVML would not give one."""
        return self._counted_handles() or []

    def _counted_handles(self) -> list[Any] | None:
        """As `_handles`, but None when NVML would not count the devices."""
        nvml = self._nvml
        count = self._query(nvml.nvmlDeviceGetCount)
        if count is None:
            return None
        return [self._query(nvml.nvmlDeviceGetHandleByIndex, i) for i in range(int(count))]

    def _inventory(self) -> GpuInventory:
        if not self._init():
            return GpuInventory()
        nvml = self._nvml
        devices: list[GpuDevice] = []
        handles = self._handles()
        for index, handle in enumerate(handles):
            if handle is None:
                continue
            name = self._query(nvml.nvmlDeviceGetName, handle)
            memory = self._query(nvml.nvmlDeviceGetMemoryInfo, handle)
            uuid = self._query(nvml.nvmlDeviceGetUUID, handle)
            devices.append(
                GpuDevice(
                    index=index,
                    name=_text(name) if name is not None else "unknown GPU",
                    vram_gb=_gib(memory.total) if memory is not None else None,
                    uuid=_text(uuid) if uuid is not None else None,
                )
            )
        self._start_health([(d.index, d.uuid, handles[d.index]) for d in devices])
        driver = self._query(nvml.nvmlSystemGetDriverVersion)
        cuda = self._query(nvml.nvmlSystemGetCudaDriverVersion)
        return GpuInventory(
            devices=tuple(devices),
            driver_version=_text(driver) if driver is not None else None,
            cuda_version=cuda_version_string(int(cuda)) if cuda is not None else None,
        )

    def _start_health(self, devices: list[tuple[int, str | None, Any]]) -> None:
        """The GPUs registered now are those whose absence later counts as missing."""
        if self._health is not None:
            self._health.close()
        errors = (self._nvml_error(), OSError, ValueError, UnicodeError)
        self._health = GpuHealthReader(self._nvml, self._query, errors)
        self._health.start(devices)

    def _read_health(self, handles: list[Any] | None) -> HealthSample | None:
        if self._health is None or not self._health.gpus_registered:
            return None  # no GPU at registration: nothing to judge
        try:
            return self._health.read(handles)
        except Exception as error:  # health is extra: the load sample still goes out
            log.warning("gpu health reading failed", error=repr(error))
            return None

    def _sample(self) -> GpuSample:
        if not self._init():
            return GpuSample([], [])
        nvml = self._nvml
        utilization: list[float] | None = []
        memory_used: list[float] | None = []
        handles = self._counted_handles()
        # Each list is all or nothing, so position i always means device i.
        for handle in handles or []:
            rates = memory = None
            if handle is not None:
                rates = self._query(nvml.nvmlDeviceGetUtilizationRates, handle)
                memory = self._query(nvml.nvmlDeviceGetMemoryInfo, handle)
            if utilization is not None:
                utilization = None if rates is None else [*utilization, float(rates.gpu)]
            if memory_used is not None:
                memory_used = None if memory is None else [*memory_used, _gib(memory.used)]
        return GpuSample(utilization or [], memory_used or [], self._read_health(handles))


def probe_from_environment(environ: Mapping[str, str] | None = None) -> GpuProbe:
    """The real NVML, or the fake one TUNEFLEET_FAKE_GPUS describes (tests and demos only:
    tunefleet/agent/fake_nvml.py). A malformed value raises FakeGpuSpecError."""
    from tunefleet.agent.fake_nvml import (
        ENV_FAKE_GPU_FAULTS,
        ENV_FAKE_GPUS,
        FAKE_GPUS_WARNING,
        parse_fake_gpus,
    )

    env = os.environ if environ is None else environ
    spec = env.get(ENV_FAKE_GPUS, "").strip()
    if not spec:
        return GpuProbe()
    nvml = parse_fake_gpus(spec, env.get(ENV_FAKE_GPU_FAULTS, "").strip() or None)
    log.warning(FAKE_GPUS_WARNING, gpus=len(nvml.gpus))
    return GpuProbe(nvml=nvml)
