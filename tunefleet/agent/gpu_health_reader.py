"""The agent's GPU health reading through NVML, sent with each heartbeat (gpu_health).

Per GPU: uncorrectable ECC errors since the driver loaded, retired pages and remapped
rows pending a reset (and a failed remapping), active clock throttle reasons, the core
temperature, and the Xid events seen since the agent started (NVML's event API, asked
with a timeout of 0 so it never waits); and the GPUs registered at the start that NVML
no longer lists. Every NVML call may raise (NotSupported on many GPUs, GPU lost, ...):
that field is then unknown (None), never an error and never a problem by itself. The
rules that judge a reading are tunefleet/gpu_health.py.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Hashable
from dataclasses import asdict
from typing import Any

import structlog

from tunefleet.gpu_health import GpuReading, HealthSample

log = structlog.get_logger(__name__)

# NVML's values (pynvml names them the same); read from the module when it has them.
_NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
_NVML_VOLATILE_ECC = 0
_NVML_TEMPERATURE_GPU = 0
_NVML_FEATURE_ENABLED = 1
_XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
_NVML_ERROR_TIMEOUT = 10  # nvmlEventSetWait's "no event within the timeout"
_THROTTLE_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}
# Events read per heartbeat at most (a storm of Xids must not hold the sample up).
_MAX_EVENTS_PER_READ = 256
MAX_XIDS_PER_GPU = 64

Query = Callable[..., Any]


def _handle_key(handle: Any) -> Hashable:
    """What identifies a device handle: pynvml's are ctypes pointers (compared by the
    address they hold), the fake's plain values."""
    try:
        return ("ptr", ctypes.cast(handle, ctypes.c_void_p).value)
    except (TypeError, ctypes.ArgumentError):
        return ("val", handle)


class GpuHealthReader:
    """Reads health through an initialised NVML module. ``query(fn, *args)`` is the
    probe's: the value, or None when the call raised one of ``errors``."""

    def __init__(
        self, nvml: Any, query: Callable[..., Any], errors: tuple[type[BaseException], ...]
    ) -> None:
        self._nvml = nvml
        self._query = query
        self._errors = errors
        self._registered: list[tuple[int, str | None]] = []  # (index, uuid) at the start
        self._events: Any = None
        self._event_devices: dict[Hashable, str] = {}  # handle → its key (uuid or #index)
        self._xids: dict[str, list[int]] = {}

    def start(self, devices: list[tuple[int, str | None, Any]]) -> None:
        """Remember the GPUs seen at registration and listen for their Xid events."""
        self._registered = [(index, uuid) for index, uuid, _ in devices]
        creator = getattr(self._nvml, "nvmlEventSetCreate", None)
        register = getattr(self._nvml, "nvmlDeviceRegisterEvents", None)
        if creator is None or register is None or not devices:
            return
        events = self._query(creator)
        if events is None:
            log.info("gpu xid events not supported here: xids are reported unknown")
            return
        kind = getattr(self._nvml, "nvmlEventTypeXidCriticalError", _XID_CRITICAL_ERROR)
        for index, uuid, handle in devices:
            if handle is None:
                continue
            try:
                register(handle, kind, events)
            except self._errors as error:  # NotSupported on this GPU: its xids unknown
                log.info("gpu xid events not supported", gpu=index, error=_text(error))
                continue
            key = uuid or f"#{index}"
            self._event_devices[_handle_key(handle)] = key
            self._xids.setdefault(key, [])
        self._events = events

    @property
    def gpus_registered(self) -> int:
        return len(self._registered)

    def close(self) -> None:
        if self._events is not None and hasattr(self._nvml, "nvmlEventSetFree"):
            self._query(self._nvml.nvmlEventSetFree, self._events)
        self._events = None

    def read(self, handles: list[Any] | None) -> HealthSample:
        """``handles``: one per device index now (None where NVML gave none); None when
        the device count itself is unknown."""
        self._drain_events()
        nvml = self._nvml
        gpus: list[GpuReading] = []
        seen: set[str] = set()
        unidentified = 0  # devices listed whose UUID (or handle) NVML would not give
        registered = dict(self._registered)
        for index, handle in enumerate(handles or []):
            if handle is None:
                unidentified += 1
                continue
            uuid_raw = self._query(nvml.nvmlDeviceGetUUID, handle)
            uuid = _text(uuid_raw) if uuid_raw is not None else None
            if uuid is None:
                unidentified += 1
            # Without its UUID a device is taken to be the one registered at its index.
            key = uuid or registered.get(index) or f"#{index}"
            seen.add(key)
            gpus.append(self._reading(index, uuid, handle, key))
        missing = self._missing(handles, seen, unidentified)
        # A GPU gone from the bus still shows the Xids it raised on the way out.
        for index, uuid in self._registered:
            key = uuid or f"#{index}"
            if key not in seen and self._xids.get(key):
                gpus.append(GpuReading(index=index, uuid=uuid, xids=tuple(self._xids[key])))
        return HealthSample(gpus=tuple(gpus), missing=missing, registered=len(self._registered))

    def _reading(self, index: int, uuid: str | None, handle: Any, key: str) -> GpuReading:
        nvml, q = self._nvml, self._query
        uncorrected = getattr(
            nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", _NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        )
        volatile = getattr(nvml, "NVML_VOLATILE_ECC", _NVML_VOLATILE_ECC)
        ecc = _call(q, nvml, "nvmlDeviceGetTotalEccErrors", handle, uncorrected, volatile)
        retired = _call(q, nvml, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
        remapped = _call(q, nvml, "nvmlDeviceGetRemappedRows", handle)
        throttle = _call(q, nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
        if throttle is None:  # the older name of the same call
            throttle = _call(q, nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", _NVML_TEMPERATURE_GPU)
        temperature = _call(q, nvml, "nvmlDeviceGetTemperature", handle, sensor)
        remap_pending = remap_failed = None
        if remapped is not None and len(remapped) >= 4:
            remap_pending, remap_failed = bool(remapped[2]), bool(remapped[3])
        return GpuReading(
            index=index,
            uuid=uuid,
            ecc_uncorrectable=int(ecc) if ecc is not None else None,
            retired_pages_pending=(
                int(retired) == _NVML_FEATURE_ENABLED if retired is not None else None
            ),
            remapped_rows_pending=remap_pending,
            remapping_failed=remap_failed,
            throttle_reasons=(
                tuple(name for bit, name in _THROTTLE_BITS.items() if int(throttle) & bit)
                if throttle is not None
                else None
            ),
            temperature_c=float(temperature) if temperature is not None else None,
            xids=tuple(self._xids[key]) if key in self._xids and self._events is not None else None,
        )

    def _missing(
        self, handles: list[Any] | None, seen: set[str], unidentified: int
    ) -> tuple[str, ...] | None:
        """Registered GPUs not listed now. A device NVML lists but will not identify is
        not counted missing (unknown is never a fault): then only a count below the
        registered one says GPUs are gone, named by the registered indexes past it."""
        if handles is None:
            return None  # NVML would not count the GPUs: not known, not "all gone"
        if unidentified:
            gone = len(self._registered) - len(handles)
            return tuple(f"#{index}" for index, _ in self._registered[-gone:]) if gone > 0 else ()
        return tuple(
            uuid or f"#{index}"
            for index, uuid in self._registered
            if (uuid or f"#{index}") not in seen
        )

    def _drain_events(self) -> None:
        if self._events is None:
            return
        wait = self._nvml.nvmlEventSetWait
        for _ in range(_MAX_EVENTS_PER_READ):
            try:
                event = wait(self._events, 0)  # 0 ms: never blocks
            except self._errors as error:
                if getattr(error, "value", None) != _NVML_ERROR_TIMEOUT:
                    log.debug("gpu event wait failed", error=_text(error))
                return  # TIMEOUT: no event waiting
            key = self._event_devices.get(_handle_key(getattr(event, "device", None)))
            xid = getattr(event, "eventData", None)
            if key is None or not isinstance(xid, int):
                continue
            seen = self._xids.setdefault(key, [])
            if xid not in seen and len(seen) < MAX_XIDS_PER_GPU:
                seen.append(xid)
            log.warning("gpu xid event", gpu=key, xid=xid)


def health_wire(sample: HealthSample) -> dict[str, Any]:
    """``gpu_health`` as it goes in a heartbeat (endpoints.GpuHealthSample reads it)."""
    return asdict(sample)


def _call(query: Query, nvml: Any, name: str, *args: Any) -> Any:
    fn = getattr(nvml, name, None)
    return None if fn is None else query(fn, *args)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)
