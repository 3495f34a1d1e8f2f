"""Every resource a half-trusted client can grow has a bound here, with its flag and default.

One table, so docs/operations.md ("Limits and abuse") and `tunefleet server --help` list the
same bounds, and each adapter reads its bound from here rather than from a constant of its
own. A zero where noted means "no bound" (for tests and benchmarks that need one off).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

MiB = 1024**2
GiB = 1024**3

# --min-free-disk's default: 1 GiB or 5 % of the disk, whichever is smaller, so a small
# disk is not declared full while most of it is free.
DEFAULT_MIN_FREE_DISK = "1GiB,5%"

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": MiB,
    "gib": GiB,
    "tib": 1024**4,
}


class BadLimit(ValueError):
    """A bound given on the command line that cannot be read."""


def parse_size(text: str) -> int:
    """``"256MiB"``, ``"1GB"``, ``"4096"`` → bytes."""
    match = _SIZE.match(text)
    if match is None:
        raise BadLimit(f"{text!r} is not a size: write bytes, or a number with B, KiB, MiB, GiB")
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or "b").lower()])


@dataclass(frozen=True, slots=True)
class FreeDiskFloor:
    """The free space kept in reserve: an absolute number of bytes, a share of the disk,
    or both (the smaller wins). Zero and zero: no floor."""

    bytes: int = GiB
    percent: float = 5.0

    @classmethod
    def parse(cls, text: str) -> FreeDiskFloor:
        """``"1GiB"``, ``"5%"``, ``"1GiB,5%"`` (the smaller of the two), ``"0"`` (off)."""
        absolute: int | None = None
        percent: float | None = None
        for part in (p.strip() for p in text.split(",") if p.strip()):
            if part.endswith("%"):
                try:
                    percent = float(part[:-1])
                except ValueError as error:
                    raise BadLimit(f"{part!r} is not a percentage such as 5%") from error
                if not 0 <= percent < 100:
                    raise BadLimit(f"{part!r}: a percentage of the disk from 0% to 99%")
            else:
                absolute = parse_size(part)
        if absolute is None and percent is None:
            raise BadLimit("give a size (1GiB), a percentage (5%) or both (1GiB,5%)")
        if absolute is None:
            return cls(bytes=0, percent=percent or 0.0) if percent else cls(0, 0.0)
        if percent is None:
            return cls(bytes=absolute, percent=0.0)
        return cls(bytes=absolute, percent=percent)

    @property
    def off(self) -> bool:
        return self.bytes == 0 and self.percent == 0.0

    def floor_for(self, total_bytes: int) -> int:
        """The reserve in bytes on a disk of ``total_bytes``."""
        candidates = []
        if self.bytes:
            candidates.append(self.bytes)
        if self.percent:
            candidates.append(int(total_bytes * self.percent / 100))
        return min(candidates) if candidates else 0

    def free_below_floor(self, path: Path) -> tuple[bool, int, int]:
        """(below the floor?, free bytes, floor bytes) for the disk holding ``path``."""
        usage = shutil.disk_usage(path)
        floor = self.floor_for(usage.total)
        return usage.free < floor, usage.free, floor

    def describe(self) -> str:
        if self.off:
            return "off"
        parts = []
        if self.bytes:
            parts.append(f"{self.bytes / GiB:g} GiB")
        if self.percent:
            parts.append(f"{self.percent:g} %")
        return " or ".join(parts) + (" (the smaller)" if len(parts) == 2 else "")


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds in force; each field is one `tunefleet server` flag of the same name."""

    # Logs: bytes stored per attempt; past it lines are dropped and counted (0: no quota).
    max_log_bytes_per_attempt: int = 256 * MiB
    # Any request body, log batches included; artifact uploads are streamed to the store.
    max_body_bytes: int = 1 * MiB
    # Progress: the merged object a job keeps (keys, and bytes as JSON).
    max_progress_keys: int = 256
    max_progress_bytes: int = 256 * 1024
    # Failed authentication per client address and window, before 429 with Retry-After.
    auth_failures_per_window: int = 20
    auth_failure_window_s: float = 60.0
    # Signed-in people (issue 24): a session ends after this long without a request, and
    # this long after sign-in whatever the use; failed password sign-ins per user name
    # and window (whatever the address) before 429.
    session_idle_s: float = 8 * 3600.0
    session_max_s: float = 7 * 86400.0
    sign_in_failures_per_user: int = 10
    sign_in_user_window_s: float = 900.0
    # Open connections per client address (0: no cap), and the time a client has to send
    # a request's headers once it has opened a connection or sent its first byte.
    max_connections_per_address: int = 1024
    request_header_timeout_s: float = 10.0
    # Free disk kept in reserve; below it new bulk writes (logs, artifacts, jobs) get 507.
    min_free_disk: FreeDiskFloor = FreeDiskFloor()

    @classmethod
    def from_cli(cls, values: dict[str, Any]) -> Limits:
        """The fields' values taken out of the command line's ``values`` (removed there)."""
        taken = {f.name: values.pop(f.name) for f in fields(cls) if f.name in values}
        return cls(**taken)
