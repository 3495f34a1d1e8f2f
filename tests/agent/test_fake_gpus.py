"""TUNEFLEET_FAKE_GPUS: real agents on fake GPUs (tests and demos only)."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from tunefleet.agent.fake_nvml import FakeGpuSpecError, parse_fake_gpus
from tunefleet.agent.gpu import GpuProbe, probe_from_environment


def test_a_plain_count_is_that_many_a100s_with_distinct_uuids() -> None:
    inventory = GpuProbe(parse_fake_gpus("4")).inventory()
    assert inventory.count == 4
    assert inventory.name == "NVIDIA A100-SXM4-80GB"
    assert inventory.vram_gb == 80.0
    assert len({d.uuid for d in inventory.devices}) == 4


def test_groups_mix_models_and_sizes() -> None:
    inventory = GpuProbe(parse_fake_gpus("2xNVIDIA H100 80GB HBM3:80; 1xTesla T4:16")).inventory()
    assert [d.name for d in inventory.devices] == [
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 80GB HBM3",
        "Tesla T4",
    ]
    assert inventory.vram_gb == 16.0  # the smallest device's, as with real mixed GPUs


@pytest.mark.parametrize(
    "spec", ["", ";", "twoxA100", "0", "65", "2xA100:big", "2x:80", "2xA100:-1"]
)
def test_a_malformed_spec_is_refused_with_the_accepted_form(spec: str) -> None:
    with pytest.raises(FakeGpuSpecError, match="COUNTxNAME"):
        parse_fake_gpus(spec)


def test_the_environment_switch_warns_and_unset_means_real_nvml() -> None:
    with capture_logs() as logs:
        probe = probe_from_environment({"TUNEFLEET_FAKE_GPUS": "2"})
    assert probe.inventory().count == 2
    assert any("tests and demos only" in entry["event"] for entry in logs)
    real = probe_from_environment({})
    assert real._nvml is None  # pynvml, imported on first use
