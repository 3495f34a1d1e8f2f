"""A fake of the parts of `pynvml` tunefleet uses, for tests and demos only.

`FakeNvml` instances quack like the pynvml module: pass one to `GpuProbe(nvml=...)`.
GPUs, versions and failures are configurable:

    FakeNvml([FakeGpu("NVIDIA A100-SXM4-80GB", total_gb=80)])   # one GPU
    FakeNvml.no_driver()                                         # nvmlInit fails
    FakeNvml([FakeGpu(fail={"nvmlDeviceGetMemoryInfo"})])        # one query fails

A real agent or orchestrator runs on it when TUNEFLEET_FAKE_GPUS is set (see
`parse_fake_gpus`): GPU quotas, fair share and GPU health can then be shown and tested
end to end on machines without NVIDIA GPUs. The GPUs it reports do not exist; a job
that needs CUDA fails on them. Never set it on a production worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from tunefleet.errors import TunefleetError

ENV_FAKE_GPUS = "TUNEFLEET_FAKE_GPUS"
FAKE_GPUS_WARNING = (
    f"{ENV_FAKE_GPUS} is set: this process reports fake GPUs (tests and demos only); "
    "jobs that need CUDA will fail here"
)

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
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


@dataclass
class FakeGpu:
    name: str = "NVIDIA A100-SXM4-80GB"
    total_gb: float = 80.0
    used_gb: float = 0.0
    utilization: int = 0
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    # Names of the nvmlDevice* functions that raise NVMLError for this device.
    fail: set[str] = field(default_factory=set)


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
    ) -> None:
        self.gpus = list(gpus or [])
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.init_error = init_error
        self.names_as_bytes = names_as_bytes
        self.fail = set(fail or ())  # module-level functions that raise
        self.initialized = False
        self.init_calls = 0
        self.shutdown_calls = 0

    @classmethod
    def no_driver(cls) -> FakeNvml:
        return cls(init_error=NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND))

    def _check(self, call: str) -> None:
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if call in self.fail:
            raise NVMLError(NVML_ERROR_UNKNOWN)

    def _gpu(self, call: str, handle: _Handle) -> FakeGpu:
        self._check(call)
        gpu = self.gpus[handle.index]
        if call in gpu.fail:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return gpu

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

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if "nvmlDeviceGetHandleByIndex" in self.gpus[index].fail:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return _Handle(index)

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


class FakeGpuSpecError(TunefleetError):
    """TUNEFLEET_FAKE_GPUS is malformed; the message says the accepted form."""

    status = 400


_SPEC_HELP = (
    f"{ENV_FAKE_GPUS} takes GPU groups separated by ';', each COUNTxNAME[:VRAM_GB], "
    "for example '4xNVIDIA A100-SXM4-80GB:80;2xNVIDIA H100 80GB HBM3:80', or a plain count"
)


def parse_fake_gpus(spec: str) -> FakeNvml:
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
    return FakeNvml(gpus)
