"""The free-disk floor: below it, new bulk data (log lines, artifact bytes, new jobs) is
refused with 507, so the database and the audit chain keep room for the small control-
plane writes (heartbeats, status reports, the audit events of refusals) that must not fail.

Asking the disk is a statvfs call; the answer is kept ``ttl_s`` (a second) so a burst of
log posts costs one, and asked again after that, so the orchestrator takes bulk writes
again by itself once space is freed (no restart). Heartbeats never ask. Two things the
disk's free space does not show yet are counted against the room above the floor:

- the bytes let through since the disk was last asked, each database byte as
  ``DATABASE_BYTES_PER_BYTE`` (a log flood sends 130 batches of 1 MiB in a second):
  a write that would not fit in the room left asks again, and is refused if it still
  does not (an upload of a declared size, a multipart upload's assembly, is refused
  before its first byte rather than stopped at the floor);
- the bytes *owed* by files that a later write copies elsewhere on the same disk: SQLite's
  write-ahead log, whose pages a checkpoint copies into the database file. A log flood
  that reuses the WAL leaves free space unchanged until a checkpoint lands up to 16 MiB at
  once (bench abuse g: a 16 MiB floor on a 96 MiB disk ended with nothing free).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from tunefleet.errors import TunefleetError
from tunefleet.limits import FreeDiskFloor, GiB, MiB

log = structlog.get_logger(__name__)

DEFAULT_TTL_S = 1.0
# What a byte sent to the database may cost the disk before the next ask: its WAL frame,
# its page again when a checkpoint copies it in, and its row's and index's share.
DATABASE_BYTES_PER_BYTE = 3

DiskUsage = Callable[[Path], Any]  # shutil.disk_usage's shape: .total and .free in bytes


class DiskBelowFloor(TunefleetError):
    """A bulk write refused: the disk is below the free-space floor, or the write would
    take it there."""

    status = 507


@dataclass(frozen=True, slots=True)
class LowDisk:
    """A watched disk found below the floor, or (``needed``) one a write would take
    below it."""

    path: Path
    free: int
    floor: int
    owed: int = 0  # what the database's write-ahead log will take of ``free`` again
    # Above the floor, but a write of this many bytes would take it below.
    needed: int = 0

    def refusal(self, what: str) -> str:
        """The 507's one-line detail."""
        to_do = "free space on that disk (writes resume by themselves) or lower --min-free-disk"
        if self.needed:
            room = max(0, self.free - self.owed - self.floor)
            return (
                f"not enough free disk to store {what}: {size_text(self.needed)} needed, "
                f"{size_text(room)} free above the {size_text(self.floor)} kept free on "
                f"the disk holding {self.path}; {to_do}"
            )
        owed = f", less {size_text(self.owed)} owed to the database log" * bool(self.owed)
        return (
            f"not enough free disk to store {what}: {size_text(self.free)} free on the disk "
            f"holding {self.path}{owed}, under the {size_text(self.floor)} kept free; {to_do}"
        )


class DiskGuard:
    """Watches the disks that hold ``paths`` (the data directory; for SQLite, the
    database's directory when it is on another disk) against ``floor``. ``owed``: files
    whose size a later write takes again on their disk (the SQLite WAL)."""

    def __init__(
        self,
        floor: FreeDiskFloor,
        paths: Iterable[Path],
        *,
        owed: Iterable[Path] = (),
        ttl_s: float = DEFAULT_TTL_S,
        usage: DiskUsage = shutil.disk_usage,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.floor = floor
        self.paths = _one_per_disk(paths)
        self._owed = tuple(owed)
        self._ttl_s = ttl_s
        self._usage = usage
        self._monotonic = monotonic
        self._checked_at: float | None = None
        self._low: LowDisk | None = None
        # Above the floor when last asked: the disk with the least room over it, that
        # room, and the bytes let through since.
        self._tightest: LowDisk | None = None
        self._room = 0
        self._admitted = 0

    def check(self, what: str, nbytes: int = 0) -> None:
        """Raise DiskBelowFloor (507) naming ``what`` was refused, when a watched disk is
        below the floor or ``nbytes`` would not fit above it; otherwise count them (they
        are about to be written) and return."""
        low = self.low(nbytes)
        if low is not None:
            raise DiskBelowFloor(low.refusal(what))

    async def watch(self, chunks: AsyncIterator[bytes], what: str) -> AsyncIterator[bytes]:
        """``chunks``, checked as they come: an upload begun above the floor stops (507)
        at the chunk that would take the disk below it, rather than filling the disk."""
        async for chunk in chunks:
            self.check(what, len(chunk))
            yield chunk

    def low(self, nbytes: int = 0) -> LowDisk | None:
        """The first watched disk below the floor, or the one ``nbytes`` would take below
        it; None when they fit. The disk is asked at most once per ttl, and again sooner
        when the bytes let through and these could use more than the room."""
        if self.floor.off:
            return None
        now = self._monotonic()
        fresh = self._checked_at is not None and now - self._checked_at < self._ttl_s
        if not fresh or (self._low is None and self._admitted + nbytes > self._room):
            self._ask(now)
        if self._low is not None:
            return self._low
        if self._admitted + nbytes > self._room and self._tightest is not None:
            return replace(self._tightest, needed=nbytes)  # asked just now: it does not fit
        self._admitted += nbytes
        return None

    def _ask(self, now: float) -> None:
        self._checked_at = now
        self._admitted = 0
        was = self._low
        self._low = self._measure()
        if self._low is not None and was is None:
            log.warning(
                "disk below the free-space floor: refusing new logs, artifacts and jobs",
                path=str(self._low.path),
                free_bytes=self._low.free,
                owed_bytes=self._low.owed,
                floor_bytes=self._low.floor,
            )
        elif self._low is None and was is not None:
            log.info("disk above the free-space floor again", path=str(was.path))

    def _measure(self) -> LowDisk | None:
        """The first disk below the floor; otherwise None, with the tightest one and its
        room kept."""
        owed = self._owed_by_disk()
        rooms: list[tuple[int, LowDisk]] = []
        for path in self.paths:
            try:
                usage = self._usage(path)
            except OSError as error:  # a path gone missing is not a full disk
                log.warning("cannot read free disk", path=str(path), error=str(error))
                continue
            floor = self.floor.floor_for(usage.total)
            path_owed = owed.get(_device(path), 0)
            if usage.free - path_owed < floor:
                return LowDisk(path, usage.free, floor, path_owed)
            rooms.append(
                (usage.free - path_owed - floor, LowDisk(path, usage.free, floor, path_owed))
            )
        # No disk read: nothing to count against; asked again after the ttl.
        self._room, self._tightest = (
            min(rooms, key=lambda r: r[0]) if rooms else (sys.maxsize, None)
        )
        return None

    def _owed_by_disk(self) -> dict[int | None, int]:
        owed: dict[int | None, int] = {}
        for path in self._owed:
            try:
                status = os.stat(path)
            except OSError:  # not there (yet): owes nothing
                continue
            owed[status.st_dev] = owed.get(status.st_dev, 0) + status.st_size
        return owed


def _one_per_disk(paths: Iterable[Path]) -> tuple[Path, ...]:
    """The paths, one per filesystem (the data directory and a database beside it are
    one disk: asked once)."""
    kept: list[Path] = []
    devices: set[int] = set()
    for path in paths:
        device = _device(path)
        if device is not None and device in devices:
            continue
        if device is not None:
            devices.add(device)
        kept.append(path)
    return tuple(kept)


def _device(path: Path) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


def size_text(n: int) -> str:
    """Bytes for a person: ``812.3 MiB``, ``1.2 GiB``, ``4096 B``."""
    if n >= GiB:
        return f"{n / GiB:.1f} GiB"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"
