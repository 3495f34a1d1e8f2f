"""The fake NVML lives in the product (tunefleet/agent/fake_nvml.py) so that real agents
can run on it through TUNEFLEET_FAKE_GPUS; tests import it from here as before."""

from tunefleet.agent.fake_nvml import (  # noqa: F401
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_ERROR_UNKNOWN,
    FakeGpu,
    FakeNvml,
    NVMLError,
)
