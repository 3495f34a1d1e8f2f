"""The agent's GPU health reading (gpu_health_reader.py) on the fake NVML: every field,
every NVML call that raises NotSupported (that field unknown, nothing else lost), Xid
events through the event API, GPUs gone since registration, and the fault file a test
flips while an agent runs (TUNEFLEET_FAKE_GPU_FAULTS)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest

from tests.fakes.fake_nvml import FakeGpu, FakeNvml
from tunefleet.agent.fake_nvml import (
    nvmlClocksThrottleReasonHwPowerBrakeSlowdown,
    nvmlClocksThrottleReasonHwThermalSlowdown,
    nvmlClocksThrottleReasonSwPowerCap,
    parse_fake_gpus,
)
from tunefleet.agent.gpu import GpuProbe, probe_from_environment
from tunefleet.agent.gpu_health_reader import health_wire
from tunefleet.gpu_health import (
    THROTTLE_REASONS,
    GpuReading,
    HealthLevel,
    HealthSample,
    assess,
    sample_from_wire,
)
from tunefleet.protocol.endpoints import HeartbeatRequest, ThrottleReason


def two_gpus(**nvml: object) -> FakeNvml:
    return FakeNvml([FakeGpu(uuid="GPU-a"), FakeGpu(uuid="GPU-b")], **nvml)  # type: ignore[arg-type]


def health(probe: GpuProbe) -> HealthSample:
    sample = probe.sample().health
    assert sample is not None
    return sample


def started(nvml: FakeNvml) -> GpuProbe:
    probe = GpuProbe(nvml)
    probe.inventory()  # registration: the GPUs whose absence later counts
    return probe


def test_a_healthy_machine_reads_every_field_known_and_nothing_wrong() -> None:
    sample = health(started(two_gpus()))
    assert sample.missing == () and sample.registered == 2
    assert sample.gpus[0] == GpuReading(
        index=0,
        uuid="GPU-a",
        ecc_uncorrectable=0,
        retired_pages_pending=False,
        remapped_rows_pending=False,
        remapping_failed=False,
        throttle_reasons=(),
        temperature_c=40.0,
        xids=(),
    )
    assert assess(sample).level == HealthLevel.HEALTHY


def test_every_field_reads_what_the_gpu_says() -> None:
    nvml = two_gpus()
    probe = started(nvml)
    gpu = nvml.gpus[1]
    gpu.ecc_uncorrectable = 3
    gpu.retired_pages_pending = True
    gpu.remapped_rows_pending = True
    gpu.remapping_failed = True
    gpu.throttle_reasons = (
        nvmlClocksThrottleReasonSwPowerCap
        | nvmlClocksThrottleReasonHwThermalSlowdown
        | nvmlClocksThrottleReasonHwPowerBrakeSlowdown
    )
    gpu.temperature_c = 91
    gpu.raise_xid(79)
    gpu.raise_xid(79)  # the same Xid again is listed once
    gpu.raise_xid(13)
    reading = health(probe).gpus[1]
    assert reading.ecc_uncorrectable == 3
    assert reading.retired_pages_pending is True
    assert reading.remapped_rows_pending is True
    assert reading.remapping_failed is True
    assert reading.throttle_reasons == ("sw_power_cap", "hw_thermal", "hw_power_brake")
    assert reading.temperature_c == 91.0
    assert reading.xids == (79, 13)
    # Xids seen since the agent started stay in every later heartbeat.
    assert health(probe).gpus[1].xids == (79, 13)
    assert health(probe).gpus[0].xids == ()


HEALTH_CALLS = {
    "nvmlDeviceGetTotalEccErrors": "ecc_uncorrectable",
    "nvmlDeviceGetRetiredPagesPendingStatus": "retired_pages_pending",
    "nvmlDeviceGetRemappedRows": "remapped_rows_pending",
    "nvmlDeviceGetCurrentClocksThrottleReasons": "throttle_reasons",
    "nvmlDeviceGetTemperature": "temperature_c",
}


@pytest.mark.parametrize("call", sorted(HEALTH_CALLS))
def test_a_call_that_is_not_supported_leaves_only_its_field_unknown(call: str) -> None:
    nvml = FakeNvml([FakeGpu(uuid="GPU-a", unsupported={call})])
    reading = health(started(nvml)).gpus[0]
    assert getattr(reading, HEALTH_CALLS[call]) is None
    if call == "nvmlDeviceGetRemappedRows":
        assert reading.remapping_failed is None
    known = {f for f in HEALTH_CALLS.values() if f != HEALTH_CALLS[call]}
    assert all(getattr(reading, f) is not None for f in known)
    assert reading.xids == ()
    assert assess(health(started(nvml))).level == HealthLevel.HEALTHY


@pytest.mark.parametrize("call", ["nvmlEventSetCreate", "nvmlEventSetWait"])
def test_without_the_event_api_xids_are_unknown_or_none_seen(call: str) -> None:
    nvml = two_gpus(unsupported={call})
    probe = started(nvml)
    nvml.gpus[0].raise_xid(79)
    sample = health(probe)
    # No event set: unknown. A set whose wait fails: none read, nothing crashes.
    expected = None if call == "nvmlEventSetCreate" else ()
    assert [g.xids for g in sample.gpus] == [expected, expected]
    assert assess(sample).level == HealthLevel.HEALTHY


def test_a_gpu_that_cannot_register_for_events_has_unknown_xids() -> None:
    nvml = FakeNvml(
        [FakeGpu(uuid="GPU-a", unsupported={"nvmlDeviceRegisterEvents"}), FakeGpu(uuid="GPU-b")]
    )
    probe = started(nvml)
    nvml.gpus[1].raise_xid(48)
    assert [g.xids for g in health(probe).gpus] == [None, (48,)]


def test_an_nvml_without_the_health_calls_reads_all_unknown() -> None:
    class OldNvml(FakeNvml):
        nvmlDeviceGetTotalEccErrors = None  # type: ignore[assignment]
        nvmlEventSetCreate = None  # type: ignore[assignment]

    reading = health(started(OldNvml([FakeGpu(uuid="GPU-a")]))).gpus[0]
    assert reading.ecc_uncorrectable is None and reading.xids is None
    assert reading.temperature_c == 40.0


def test_a_gpu_gone_from_the_bus_is_missing_and_keeps_its_xids() -> None:
    nvml = two_gpus()
    probe = started(nvml)
    nvml.gpus[1].raise_xid(79)
    nvml.gpus[1].lost = True
    sample = health(probe)
    assert sample.missing == ("GPU-b",)
    assert [(g.index, g.uuid, g.xids) for g in sample.gpus] == [
        (0, "GPU-a", ()),
        (1, "GPU-b", (79,)),
    ]
    verdict = assess(sample)
    assert verdict.level == HealthLevel.UNHEALTHY
    assert verdict.reason == "Xid 79 on GPU 1 (and 1 more)"
    assert probe.sample().utilization_pct == [0.0]  # the load sample goes on for the rest


def test_when_nvml_will_not_count_the_gpus_missing_is_unknown() -> None:
    nvml = two_gpus()
    probe = started(nvml)
    nvml.fail.add("nvmlDeviceGetCount")
    sample = health(probe)
    assert sample.missing is None and sample.gpus == ()
    assert assess(sample).level == HealthLevel.HEALTHY


def test_no_driver_means_no_health_reading_and_no_crash() -> None:
    probe = GpuProbe(FakeNvml.no_driver())
    probe.inventory()
    assert probe.sample().health is None


def test_the_reading_goes_on_the_wire_and_parses_back_the_same() -> None:
    nvml = two_gpus()
    probe = started(nvml)
    nvml.gpus[0].raise_xid(79)
    nvml.gpus[0].unsupported.add("nvmlDeviceGetTemperature")
    sample = health(probe)
    body = json.loads(json.dumps({"worker_id": "w_1", "gpu_health": health_wire(sample)}))
    parsed = HeartbeatRequest.model_validate(body).gpu_health
    assert parsed is not None and sample_from_wire(parsed) == sample


def test_the_wire_knows_the_throttle_reasons_the_rules_know() -> None:
    assert set(get_args(ThrottleReason)) == THROTTLE_REASONS


def test_an_unreadable_report_never_costs_the_heartbeat() -> None:
    odd = {"gpus": [{"index": 0, "xids": "79", "temperature_c": "hot", "uuid": "GPU-a"}]}
    parsed = HeartbeatRequest.model_validate({"worker_id": "w", "gpu_health": odd}).gpu_health
    assert parsed is not None
    assert sample_from_wire(parsed).gpus == (GpuReading(index=0, uuid="GPU-a"),)
    for junk in (5, "x", {"gpus": "all"}, {"gpus": [{"no": "index"}]}):
        body = HeartbeatRequest.model_validate({"worker_id": "w", "gpu_health": junk})
        assert body.worker_id == "w"


def test_the_fault_file_flips_health_while_the_agent_runs(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    probe = probe_from_environment(
        {"TUNEFLEET_FAKE_GPUS": "2", "TUNEFLEET_FAKE_GPU_FAULTS": str(faults)}
    )
    probe.inventory()
    assert assess(health(probe)).level == HealthLevel.HEALTHY  # no file yet: as configured
    faults.write_text(json.dumps({"1": {"xids": [79]}, "0": {"temperature_c": 90}}))
    verdict = assess(health(probe))
    assert (verdict.level, verdict.reason) == (HealthLevel.UNHEALTHY, "Xid 79 on GPU 1")
    assert verdict.problems == ("Xid 79 on GPU 1", "GPU 0 at 90 °C")
    assert health(probe).gpus[1].xids == (79,)  # raised once per change of the file


def test_the_fault_file_ignores_what_it_cannot_use(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    nvml = parse_fake_gpus("1", str(faults))
    probe = started(nvml)
    faults.write_text("{half written")
    assert assess(health(probe)).level == HealthLevel.HEALTHY
    nvml.apply_faults({"7": {"lost": True}, "x": 1, "0": {"nonsense": 1, "lost": False}})
    assert health(probe).missing == ()


def test_a_gpu_that_will_not_give_its_uuid_is_not_counted_missing() -> None:
    nvml = two_gpus()
    probe = started(nvml)
    nvml.gpus[1].raise_xid(79)
    nvml.gpus[1].unsupported.add("nvmlDeviceGetUUID")
    sample = health(probe)
    assert sample.missing == ()
    # Taken to be the GPU registered at its index: its Xids are still its own.
    assert [(g.uuid, g.xids) for g in sample.gpus] == [("GPU-a", ()), (None, (79,))]


def test_a_handle_nvml_will_not_give_is_unknown_not_missing() -> None:
    nvml = two_gpus()
    probe = started(nvml)
    nvml.gpus[0].fail.add("nvmlDeviceGetHandleByIndex")
    sample = health(probe)
    assert sample.missing == ()
    assert [g.index for g in sample.gpus] == [1]
    assert assess(sample).level == HealthLevel.HEALTHY


def test_by_count_when_uuids_cannot_be_read() -> None:
    nvml = FakeNvml([FakeGpu(uuid=f"GPU-{i}") for i in range(3)])
    probe = started(nvml)
    for gpu in nvml.gpus:
        gpu.unsupported.add("nvmlDeviceGetUUID")
    nvml.gpus[0].lost = True
    sample = health(probe)
    assert sample.missing == ("#2",)  # one fewer than registered: which one is not known
    assert assess(sample).reason == "GPU 2 missing since registration"
