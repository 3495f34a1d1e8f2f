"""A fake of the parts of `pynvml` tunefleet uses, for tests and demos only.

`FakeNvml` instances quack like the pynvml module: pass one to `GpuProbe(nvml=...)`.
GPUs, versions and failures are configurable:

    FakeNvml([FakeGpu("NVIDIA A100-SXM4-80GB", total_gb=80)])   # one GPU
    FakeNvml.no_driver()                                         # nvmlInit fails
    FakeNvml([FakeGpu(fail={"nvmlDeviceGetMemoryInfo"})])        # one query fails
    FakeNvml([FakeGpu(unsupported={"nvmlDeviceGetTemperature"})])  # NotSupported
    nvml.gpus[1].raise_xid(79)                                    # an Xid event
    nvml.gpus[0].lost = True                                      # fell off the bus

A real agent or orchestrator runs on it when TUNEFLEET_FAKE_GPUS is set (see
`parse_fake_gpus`): GPU quotas, fair share and GPU health can then be shown and tested
end to end on machines without NVIDIA GPUs. The GPUs it reports do not exist; a job
that needs CUDA fails on them. Never set it on a production worker.

TUNEFLEET_FAKE_GPU_FAULTS (tests and demos only, with TUNEFLEET_FAKE_GPUS) names a JSON
file the fake reads again whenever it changes, so a test can flip a GPU's health while
the agent runs: ``{"1": {"xids": [79]}, "0": {"temperature_c": 90, "lost": false}}``.
Keys are GPU indexes; values set that FakeGpu's fields (`FAULT_FIELDS`); each Xid listed
is raised once per change of the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tunefleet.errors import TunefleetError

ENV_FAKE_GPUS = "TUNEFLEET_FAKE_GPUS"
ENV_FAKE_GPU_FAULTS = "TUNEFLEET_FAKE_GPU_FAULTS"
FAKE_GPUS_WARNING = (
    f"{ENV_FAKE_GPUS} is set: this process reports fake GPUs (tests and demos only); "
    "jobs that need CUDA will fail here"
)

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}
_GIB = 1024**3


class NVMLError(Exception):
    """Like pynvml.NVMLError: carries the NVML return code in `value`."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML error {self.value}")


# pynvml's constants for what the health reading asks (same values as NVML's).
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_TEMPERATURE_GPU = 0
NVML_FEATURE_ENABLED = 1
nvmlEventTypeXidCriticalError = 0x8
nvmlClocksThrottleReasonSwPowerCap = 0x4
nvmlClocksThrottleReasonHwSlowdown = 0x8
nvmlClocksThrottleReasonSwThermalSlowdown = 0x20
nvmlClocksThrottleReasonHwThermalSlowdown = 0x40
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80


@dataclass
class FakeGpu:
    name: str = "NVIDIA A100-SXM4-80GB"
    total_gb: float = 80.0
    used_gb: float = 0.0
    utilization: int = 0
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    # Names of the nvmlDevice* functions that raise NVMLError for this device.
    fail: set[str] = field(default_factory=set)
    # Names of the nvmlDevice* functions that raise NotSupported for this device.
    unsupported: set[str] = field(default_factory=set)
    # Health: what the health reading's NVML calls answer.
    ecc_uncorrectable: int = 0
    retired_pages_pending: bool = False
    remapped_rows_pending: bool = False
    remapping_failed: bool = False
    throttle_reasons: int = 0  # a bit mask of nvmlClocksThrottleReason*
    temperature_c: int = 40
    # Fallen off the bus: its handle raises GPU_IS_LOST and it is not counted.
    lost: bool = False
    # Xid events raised and not yet read through nvmlEventSetWait.
    pending_xids: list[int] = field(default_factory=list)

    def raise_xid(self, xid: int) -> None:
        self.pending_xids.append(xid)


# What TUNEFLEET_FAKE_GPU_FAULTS may set on a FakeGpu ("xids" raises events instead).
FAULT_FIELDS = {
    "ecc_uncorrectable": int,
    "retired_pages_pending": bool,
    "remapped_rows_pending": bool,
    "remapping_failed": bool,
    "throttle_reasons": int,
    "temperature_c": int,
    "lost": bool,
}


@dataclass(frozen=True)
class _Handle:
    index: int


class FakeNvml:
    NVMLError = NVMLError

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        driver_version: str = "550.54.15",
        cuda_version: int = 12040,
        init_error: BaseException | None = None,
        names_as_bytes: bool = False,
        fail: set[str] | None = None,
        unsupported: set[str] | None = None,
        faults_file: str | Path | None = None,
    ) -> None:
        self.gpus = list(gpus or [])
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.init_error = init_error
        self.names_as_bytes = names_as_bytes
        self.fail = set(fail or ())  # module-level functions that raise
        self.unsupported = set(unsupported or ())  # module-level functions: NotSupported
        self.faults_file = Path(faults_file) if faults_file else None
        self._faults_seen: float | None = None
        self.event_sets: list[_EventSet] = []
        self.initialized = False
        self.init_calls = 0
        self.shutdown_calls = 0

    @classmethod
    def no_driver(cls) -> FakeNvml:
        return cls(init_error=NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND))

    def _check(self, call: str) -> None:
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        self._read_faults()
        if call in self.fail:
            raise NVMLError(NVML_ERROR_UNKNOWN)
        if call in self.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def _gpu(self, call: str, handle: _Handle) -> FakeGpu:
        self._check(call)
        gpu = self.gpus[handle.index]
        if call in gpu.fail or gpu.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if call in gpu.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _read_faults(self) -> None:
        """Apply TUNEFLEET_FAKE_GPU_FAULTS's file when it changed (tests and demos only)."""
        if self.faults_file is None:
            return
        try:
            changed = self.faults_file.stat().st_mtime_ns
        except OSError:
            return  # not written yet
        if changed == self._faults_seen:
            return
        self._faults_seen = changed
        try:
            faults = json.loads(self.faults_file.read_text())
        except (OSError, ValueError):
            return  # half written: read it again at its next change
        if isinstance(faults, dict):
            self.apply_faults(faults)

    def apply_faults(self, faults: dict[str, Any]) -> None:
        for key, values in faults.items():
            if not (str(key).isdigit() and int(key) < len(self.gpus) and isinstance(values, dict)):
                continue
            gpu = self.gpus[int(key)]
            for name, value in values.items():
                if name == "xids" and isinstance(value, list):
                    gpu.pending_xids.extend(int(x) for x in value)
                elif name in FAULT_FIELDS:
                    setattr(gpu, name, FAULT_FIELDS[name](value))

    def _str(self, value: str) -> str | bytes:
        return value.encode() if self.names_as_bytes else value

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._check("nvmlShutdown")
        self.shutdown_calls += 1
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._check("nvmlSystemGetDriverVersion")
        return self._str(self.driver_version)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check("nvmlSystemGetCudaDriverVersion")
        return self.cuda_version

    def _present(self) -> list[int]:
        """Indexes of the GPUs still on the bus: a lost one is not listed, and those after
        it move up, as on a real machine."""
        return [i for i, gpu in enumerate(self.gpus) if not gpu.lost]

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self._present())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check("nvmlDeviceGetHandleByIndex")
        present = self._present()
        if not 0 <= index < len(present):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if "nvmlDeviceGetHandleByIndex" in self.gpus[present[index]].fail:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return _Handle(present[index])

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        self._gpu("nvmlDeviceGetIndex", handle)
        return self._present().index(handle.index)

    def nvmlDeviceGetName(self, handle: _Handle) -> str | bytes:
        return self._str(self._gpu("nvmlDeviceGetName", handle).name)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str | bytes:
        return self._str(self._gpu("nvmlDeviceGetUUID", handle).uuid)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        total = int(gpu.total_gb * _GIB)
        used = int(gpu.used_gb * _GIB)
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=gpu.utilization, memory=gpu.utilization)

    # --- health ---------------------------------------------------------------------

    def nvmlDeviceGetTotalEccErrors(
        self, handle: _Handle, error_type: int, counter_type: int
    ) -> int:
        gpu = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        if (error_type, counter_type) != (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC):
            return 0
        return gpu.ecc_uncorrectable

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: _Handle) -> int:
        gpu = self._gpu("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        return NVML_FEATURE_ENABLED if gpu.retired_pages_pending else 0

    def nvmlDeviceGetRemappedRows(self, handle: _Handle) -> tuple[int, int, int, int]:
        """(correctable rows, uncorrectable rows, remapping pending, remapping failed)."""
        gpu = self._gpu("nvmlDeviceGetRemappedRows", handle)
        return (0, 0, int(gpu.remapped_rows_pending), int(gpu.remapping_failed))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: _Handle) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", handle).throttle_reasons

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlEventSetCreate(self) -> _EventSet:
        self._check("nvmlEventSetCreate")
        event_set = _EventSet()
        self.event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: _Handle, types: int, event_set: _EventSet) -> None:
        self._gpu("nvmlDeviceRegisterEvents", handle)
        if types & nvmlEventTypeXidCriticalError:
            event_set.devices.add(handle.index)

    def nvmlEventSetWait(self, event_set: _EventSet, timeout_ms: int) -> SimpleNamespace:
        """The next Xid event of a registered GPU, or NVMLError(TIMEOUT) at once: the fake
        never waits, as the agent asks with a timeout of 0."""
        self._check("nvmlEventSetWait")
        for index in sorted(event_set.devices):
            gpu = self.gpus[index]
            if gpu.pending_xids:
                return SimpleNamespace(
                    device=_Handle(index),
                    eventType=nvmlEventTypeXidCriticalError,
                    eventData=gpu.pending_xids.pop(0),
                )
        raise NVMLError(NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        self._check("nvmlEventSetFree")
        event_set.freed = True


@dataclass(eq=False)
class _EventSet:
    devices: set[int] = field(default_factory=set)
    freed: bool = False


class FakeGpuSpecError(TunefleetError):
    """TUNEFLEET_FAKE_GPUS is malformed; the message says the accepted form."""

    status = 400


_SPEC_HELP = (
    f"{ENV_FAKE_GPUS} takes GPU groups separated by ';', each COUNTxNAME[:VRAM_GB], "
    "for example '4xNVIDIA A100-SXM4-80GB:80;2xNVIDIA H100 80GB HBM3:80', or a plain count"
)


def parse_fake_gpus(spec: str, faults_file: str | None = None) -> FakeNvml:
    """The fake NVML a TUNEFLEET_FAKE_GPUS value describes.

    ``"4"`` is four A100 80 GB; ``"2xNVIDIA H100 80GB HBM3:80;1xTesla T4:16"`` mixes
    models. Every GPU gets its own UUID, so the devices are told apart as real ones are.
    """
    gpus: list[FakeGpu] = []
    for group in (part.strip() for part in spec.split(";")):
        if not group:
            continue
        count_text, sep, rest = group.partition("x")
        if not sep:
            count_text, rest = group, FakeGpu.name
        name, _, vram_text = rest.rpartition(":") if ":" in rest else (rest, "", "")
        try:
            count = int(count_text.strip())
            vram = float(vram_text) if vram_text else FakeGpu.total_gb
        except ValueError:
            raise FakeGpuSpecError(f"{_SPEC_HELP}; got {group!r}") from None
        if not 0 < count <= 64 or vram <= 0 or not name.strip():
            raise FakeGpuSpecError(f"{_SPEC_HELP}; got {group!r}")
        for _ in range(count):
            index = len(gpus)
            gpus.append(
                FakeGpu(
                    name=name.strip(),
                    total_gb=vram,
                    uuid=f"GPU-fake0000-0000-0000-0000-{index:012d}",
                )
            )
    if not gpus:
        raise FakeGpuSpecError(f"{_SPEC_HELP}; got {spec!r}")
    return FakeNvml(gpus, faults_file=faults_file)
