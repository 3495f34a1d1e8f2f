"""GPU discovery against the fake NVML: what a machine reports, and that it never crashes."""

from __future__ import annotations

import builtins
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.fakes.fake_nvml import NVML_ERROR_DRIVER_NOT_LOADED, FakeGpu, FakeNvml, NVMLError
from tunefleet.agent.gpu import GpuInventory, GpuProbe, GpuSample, cuda_version_string


def two_a100s() -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu(
                "NVIDIA A100-SXM4-80GB", total_gb=79.33, used_gb=10.5, utilization=87, uuid="GPU-a"
            ),
            FakeGpu(
                "NVIDIA A100-SXM4-80GB", total_gb=79.33, used_gb=0.25, utilization=3, uuid="GPU-b"
            ),
        ],
        driver_version="550.54.15",
        cuda_version=12040,
    )


def test_gpus_present_report_nested_and_flat_fields() -> None:
    inv = GpuProbe(two_a100s()).inventory()
    assert inv.count == 2
    assert inv.name == "NVIDIA A100-SXM4-80GB"
    assert inv.vram_gb == 79.3
    assert inv.accelerator == "cuda"
    assert inv.driver_version == "550.54.15"
    assert inv.cuda_version == "12.4"
    assert [d.uuid for d in inv.devices] == ["GPU-a", "GPU-b"]
    fields = inv.register_fields()
    assert fields["gpu_count"] == 2
    assert fields["gpu_name"] == "NVIDIA A100-SXM4-80GB"
    assert fields["gpu_vram_gb"] == 79.3
    assert fields["accelerator_type"] == "cuda"
    info = fields["gpu_info"]
    assert info["count"] == 2
    assert info["name"] == "NVIDIA A100-SXM4-80GB"
    assert info["vram_gb"] == 79.3
    assert info["accelerator"] == "cuda"
    assert info["driver"] == "550.54.15"
    assert info["cuda"] == "12.4"
    assert info["devices"][1] == {
        "index": 1,
        "name": "NVIDIA A100-SXM4-80GB",
        "vram_gb": 79.3,
        "uuid": "GPU-b",
    }


def test_mixed_machine_reports_first_name_and_smallest_vram() -> None:
    nvml = FakeNvml([FakeGpu("NVIDIA H100", total_gb=80), FakeGpu("NVIDIA L4", total_gb=24)])
    inv = GpuProbe(nvml).inventory()
    assert inv.name == "NVIDIA H100"
    assert inv.vram_gb == 24.0
    assert [d.name for d in inv.devices] == ["NVIDIA H100", "NVIDIA L4"]


def test_no_driver_reports_zero_gpus_and_logs_once() -> None:
    nvml = FakeNvml.no_driver()
    probe = GpuProbe(nvml)
    with capture_logs() as logs:
        inv = probe.inventory()
        probe.sample()
        probe.inventory()
    assert [(e["log_level"], e["event"]) for e in logs] == [
        ("info", "no GPUs: NVML did not initialise")
    ]
    assert "Library Not Found" in logs[0]["error"]
    assert inv == GpuInventory()
    assert inv.count == 0
    assert inv.name is None
    assert inv.vram_gb is None
    assert inv.accelerator == "cpu"
    assert probe.sample() == GpuSample([], [])
    probe.inventory()
    assert nvml.init_calls == 1  # tried once, not on every heartbeat
    fields = inv.register_fields()
    assert fields["gpu_count"] == 0
    assert fields["gpu_info"]["count"] == 0
    assert fields["gpu_info"]["devices"] == []


@pytest.mark.parametrize(
    "error", [NVMLError(NVML_ERROR_DRIVER_NOT_LOADED), OSError("libnvidia-ml.so.1: not found")]
)
def test_init_failures_of_any_kind_mean_zero_gpus(error: BaseException) -> None:
    assert GpuProbe(FakeNvml(init_error=error)).inventory().count == 0


def test_pynvml_not_installed_means_zero_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_pynvml(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(__import__("sys").modules, "pynvml", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    probe = GpuProbe()
    assert probe.inventory().count == 0
    assert probe.sample() == GpuSample([], [])


def test_real_pynvml_on_this_machine_never_raises() -> None:
    probe = GpuProbe()
    inv = probe.inventory()
    assert inv.count >= 0
    probe.sample()
    probe.close()


def test_driver_without_gpus_reports_zero() -> None:
    probe = GpuProbe(FakeNvml([]))
    assert probe.inventory().count == 0
    assert probe.inventory().driver_version == "550.54.15"
    assert probe.sample() == GpuSample([], [])


def test_device_query_error_skips_only_that_value() -> None:
    nvml = FakeNvml(
        [
            FakeGpu(
                "NVIDIA L4", total_gb=24, fail={"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUUID"}
            ),
            FakeGpu("NVIDIA L4", total_gb=24),
        ]
    )
    inv = GpuProbe(nvml).inventory()
    assert inv.count == 2
    assert inv.devices[0].vram_gb is None
    assert inv.devices[0].uuid is None
    assert inv.devices[0].name == "NVIDIA L4"
    assert inv.vram_gb == 24.0


def test_lost_device_handle_is_skipped_but_indexes_stay_true() -> None:
    nvml = FakeNvml([FakeGpu("A", fail={"nvmlDeviceGetHandleByIndex"}), FakeGpu("B")])
    probe = GpuProbe(nvml)
    inv = probe.inventory()
    assert [(d.index, d.name) for d in inv.devices] == [(1, "B")]
    # a sample cannot say which device a value belongs to, so it says nothing
    sample = probe.sample()
    assert (sample.utilization_pct, sample.memory_used_gb) == ([], [])
    # Health is per device and says which: the device that answers is read.
    assert sample.health is not None and [g.index for g in sample.health.gpus] == [1]


def test_name_query_error_still_reports_the_device() -> None:
    inv = GpuProbe(FakeNvml([FakeGpu(fail={"nvmlDeviceGetName"})])).inventory()
    assert inv.count == 1
    assert inv.name == "unknown GPU"


def test_system_version_errors_leave_versions_unknown() -> None:
    nvml = FakeNvml(
        [FakeGpu()], fail={"nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion"}
    )
    inv = GpuProbe(nvml).inventory()
    assert inv.count == 1
    assert inv.driver_version is None
    assert inv.cuda_version is None


def test_device_count_error_means_zero_gpus() -> None:
    probe = GpuProbe(FakeNvml([FakeGpu()], fail={"nvmlDeviceGetCount"}))
    assert probe.inventory().count == 0
    assert probe.sample() == GpuSample([], [])


def test_bytes_names_from_older_pynvml_are_decoded() -> None:
    nvml = FakeNvml(
        [FakeGpu("Tesla V100-SXM2-16GB", total_gb=16, uuid="GPU-v")],
        driver_version="470.82.01",
        cuda_version=11040,
        names_as_bytes=True,
    )
    inv = GpuProbe(nvml).inventory()
    assert inv.name == "Tesla V100-SXM2-16GB"
    assert inv.devices[0].uuid == "GPU-v"
    assert inv.driver_version == "470.82.01"
    assert inv.cuda_version == "11.4"


def test_sample_reports_utilization_and_memory_per_device() -> None:
    sample = GpuProbe(two_a100s()).sample()
    assert sample.utilization_pct == [87.0, 3.0]
    assert sample.memory_used_gb == [10.5, 0.2]


def test_sample_follows_live_changes() -> None:
    nvml = two_a100s()
    probe = GpuProbe(nvml)
    probe.sample()
    nvml.gpus[0].utilization = 12
    assert probe.sample().utilization_pct == [12.0, 3.0]


def test_sample_query_error_empties_only_that_list() -> None:
    nvml = two_a100s()
    nvml.gpus[1].fail.add("nvmlDeviceGetUtilizationRates")
    sample = GpuProbe(nvml).sample()
    assert sample.utilization_pct == []
    assert sample.memory_used_gb == [10.5, 0.2]


def test_unexpected_error_inside_nvml_is_contained() -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise RuntimeError("binding bug")

    probe = GpuProbe(Broken([FakeGpu()]))
    assert probe.inventory() == GpuInventory()
    assert probe.sample() == GpuSample([], [])


def test_close_shuts_nvml_down_once_and_reopens_on_demand() -> None:
    nvml = two_a100s()
    probe = GpuProbe(nvml)
    probe.close()
    assert nvml.shutdown_calls == 0  # never initialised, nothing to shut down
    probe.inventory()
    probe.close()
    assert nvml.shutdown_calls == 1
    assert not nvml.initialized
    assert probe.inventory().count == 2
    assert nvml.init_calls == 2


@pytest.mark.parametrize(("raw", "text"), [(12040, "12.4"), (11080, "11.8"), (13000, "13.0")])
def test_cuda_version_string(raw: int, text: str) -> None:
    assert cuda_version_string(raw) == text
