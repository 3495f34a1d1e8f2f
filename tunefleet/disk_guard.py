"""The free-disk floor: below it, new bulk data (log lines, artifact bytes, new jobs) is
refused with 507, so the database and the audit chain keep room for the small control-
plane writes (heartbeats, status reports, the audit events of refusals) that must not fail.

Asking the disk is a statvfs call; the answer is kept ``ttl_s`` (a second) so a burst of
log posts costs one, and asked again after that, so the orchestrator takes bulk writes
again by itself once space is freed (no restart). Heartbeats never ask.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from tunefleet.errors import TunefleetError
from tunefleet.limits import FreeDiskFloor, GiB, MiB

log = structlog.get_logger(__name__)

DEFAULT_TTL_S = 1.0

DiskUsage = Callable[[Path], Any]  # shutil.disk_usage's shape: .total and .free in bytes


class DiskBelowFloor(TunefleetError):
    """A bulk write refused: the disk is below the free-space floor."""

    status = 507


@dataclass(frozen=True, slots=True)
class LowDisk:
    """A watched disk found below the floor."""

    path: Path
    free: int
    floor: int


class DiskGuard:
    """Watches the disks that hold ``paths`` (the data directory; for SQLite, the
    database's directory when it is on another disk) against ``floor``."""

    def __init__(
        self,
        floor: FreeDiskFloor,
        paths: Iterable[Path],
        *,
        ttl_s: float = DEFAULT_TTL_S,
        usage: DiskUsage = shutil.disk_usage,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.floor = floor
        self.paths = _one_per_disk(paths)
        self._ttl_s = ttl_s
        self._usage = usage
        self._monotonic = monotonic
        self._checked_at: float | None = None
        self._low: LowDisk | None = None

    def check(self, what: str) -> None:
        """Raise DiskBelowFloor (507) naming ``what`` was refused, when a watched disk is
        below the floor; return at once otherwise."""
        low = self.low()
        if low is not None:
            raise DiskBelowFloor(
                f"not enough free disk to store {what}: {size_text(low.free)} free on the "
                f"disk holding {low.path}, under the {size_text(low.floor)} kept free for "
                "the database and audit; free space on that disk (writes resume by "
                "themselves) or lower --min-free-disk"
            )

    async def watch(self, chunks: AsyncIterator[bytes], what: str) -> AsyncIterator[bytes]:
        """``chunks``, checked as they come: an upload begun above the floor stops (507)
        when the disk falls below it, rather than filling the disk to the last byte."""
        async for chunk in chunks:
            self.check(what)
            yield chunk

    def low(self) -> LowDisk | None:
        """The first watched disk below the floor, or None; asked at most once per ttl."""
        if self.floor.off:
            return None
        now = self._monotonic()
        if self._checked_at is not None and now - self._checked_at < self._ttl_s:
            return self._low
        self._checked_at = now
        was = self._low
        self._low = self._measure()
        if self._low is not None and was is None:
            log.warning(
                "disk below the free-space floor: refusing new logs, artifacts and jobs",
                path=str(self._low.path),
                free_bytes=self._low.free,
                floor_bytes=self._low.floor,
            )
        elif self._low is None and was is not None:
            log.info("disk above the free-space floor again", path=str(was.path))
        return self._low

    def _measure(self) -> LowDisk | None:
        for path in self.paths:
            try:
                usage = self._usage(path)
            except OSError as error:  # a path gone missing is not a full disk
                log.warning("cannot read free disk", path=str(path), error=str(error))
                continue
            floor = self.floor.floor_for(usage.total)
            if usage.free < floor:
                return LowDisk(path, usage.free, floor)
        return None


def _one_per_disk(paths: Iterable[Path]) -> tuple[Path, ...]:
    """The paths, one per filesystem (the data directory and a database beside it are
    one disk: asked once)."""
    kept: list[Path] = []
    devices: set[int] = set()
    for path in paths:
        try:
            device = os.stat(path).st_dev
        except OSError:
            device = None
        if device is not None and device in devices:
            continue
        if device is not None:
            devices.add(device)
        kept.append(path)
    return tuple(kept)


def size_text(n: int) -> str:
    """Bytes for a person: ``812.3 MiB``, ``1.2 GiB``, ``4096 B``."""
    if n >= GiB:
        return f"{n / GiB:.1f} GiB"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"
