"""The free-disk floor's logic, with an injected free-space reader and clock: refuse
below the floor with a one-line 507 detail, ask the disk at most once per ttl, and take
writes again by itself once space returns (issue 23, finding 2)."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tunefleet.disk_guard import DiskBelowFloor, DiskGuard, size_text
from tunefleet.limits import FreeDiskFloor, GiB, MiB


class Disk:
    """A disk whose free space the test sets, counting how often it is asked."""

    def __init__(self, total: int, free: int) -> None:
        self.total, self.free, self.asked = total, free, 0

    def usage(self, _path: Path) -> SimpleNamespace:
        self.asked += 1
        return SimpleNamespace(total=self.total, free=self.free)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _guard(disk: Disk, clock: Clock, floor: str, tmp_path: Path) -> DiskGuard:
    return DiskGuard(
        FreeDiskFloor.parse(floor), [tmp_path], ttl_s=1.0, usage=disk.usage, monotonic=clock
    )


def test_below_the_floor_a_bulk_write_gets_507_saying_what_to_do(tmp_path: Path) -> None:
    disk = Disk(total=100 * GiB, free=512 * MiB)
    guard = _guard(disk, Clock(), "1GiB,5%", tmp_path)
    with pytest.raises(DiskBelowFloor) as refused:
        guard.check("log lines")
    detail = str(refused.value)
    assert refused.value.status == 507
    assert "log lines" in detail and "512.0 MiB free" in detail and "1.0 GiB" in detail
    assert str(tmp_path) in detail
    assert "free space" in detail and "--min-free-disk" in detail
    assert "\n" not in detail and len(detail) <= 300


def test_above_the_floor_nothing_is_refused(tmp_path: Path) -> None:
    disk = Disk(total=100 * GiB, free=2 * GiB)
    _guard(disk, Clock(), "1GiB,5%", tmp_path).check("a new job")


def test_the_smaller_of_size_and_share_is_the_floor(tmp_path: Path) -> None:
    # 5 % of a 4 GiB disk is 204.8 MiB, smaller than 1 GiB: 300 MiB free is enough.
    disk = Disk(total=4 * GiB, free=300 * MiB)
    guard = _guard(disk, Clock(), "1GiB,5%", tmp_path)
    guard.check("a new job")
    disk.free = 100 * MiB
    clock = Clock()
    with pytest.raises(DiskBelowFloor, match=r"204\.8 MiB"):
        _guard(disk, clock, "1GiB,5%", tmp_path).check("a new job")


def test_the_disk_is_asked_once_per_ttl_and_recovery_needs_no_restart(tmp_path: Path) -> None:
    disk = Disk(total=100 * GiB, free=10 * MiB)
    clock = Clock()
    guard = _guard(disk, clock, "1GiB", tmp_path)
    for _ in range(50):
        with pytest.raises(DiskBelowFloor):
            guard.check("log lines")
    assert disk.asked == 1
    disk.free = 5 * GiB  # space freed: still refused until the answer is a ttl old
    with pytest.raises(DiskBelowFloor):
        guard.check("log lines")
    clock.now += 1.0
    guard.check("log lines")
    assert disk.asked == 2
    disk.free = 0  # and full again: refused again after the next ttl
    clock.now += 1.0
    with pytest.raises(DiskBelowFloor):
        guard.check("log lines")


def test_a_floor_of_zero_never_asks_the_disk(tmp_path: Path) -> None:
    disk = Disk(total=GiB, free=0)
    guard = _guard(disk, Clock(), "0", tmp_path)
    guard.check("artifact bytes")
    assert disk.asked == 0


def test_a_disk_that_cannot_be_read_is_not_called_full(tmp_path: Path) -> None:
    def unreadable(_path: Path) -> SimpleNamespace:
        raise FileNotFoundError(errno.ENOENT, "gone")

    DiskGuard(FreeDiskFloor(), [tmp_path], usage=unreadable).check("a new job")


def test_each_disk_is_watched_once(tmp_path: Path) -> None:
    beside = tmp_path / "db"
    beside.mkdir()
    guard = DiskGuard(FreeDiskFloor(), [tmp_path, beside, tmp_path])
    assert guard.paths == (tmp_path,)  # one filesystem: one statvfs


async def test_an_upload_stops_when_the_disk_falls_below_the_floor(tmp_path: Path) -> None:
    disk = Disk(total=100 * GiB, free=5 * GiB)
    clock = Clock()
    guard = _guard(disk, clock, "1GiB", tmp_path)

    async def body() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b"x" * 1024
            disk.free -= 1 * GiB
            clock.now += 1.0

    received = []
    with pytest.raises(DiskBelowFloor, match="artifact bytes"):
        async for chunk in guard.watch(body(), "artifact bytes"):
            received.append(chunk)
    assert 0 < len(received) < 10


def test_sizes_read_as_a_person_writes_them() -> None:
    assert size_text(4096) == "4.0 KiB"
    assert size_text(812 * MiB) == "812.0 MiB"
    assert size_text(3 * GiB // 2) == "1.5 GiB"
    assert size_text(12) == "12 B"


def test_what_the_database_log_owes_counts_as_used(tmp_path: Path) -> None:
    """SQLite's WAL is copied into the database file by a checkpoint: 20 MiB free with
    a 12 MiB WAL on the same disk is 8 MiB once the checkpoint lands, under a 16 MiB floor."""
    wal = tmp_path / "tunefleet.db-wal"
    with wal.open("wb") as out:
        out.truncate(12 * MiB)
    disk = Disk(total=96 * MiB, free=20 * MiB)
    guard = DiskGuard(FreeDiskFloor.parse("16MiB"), [tmp_path], owed=[wal], usage=disk.usage)
    with pytest.raises(DiskBelowFloor) as refused:
        guard.check("log lines")
    assert "less 12.0 MiB owed to the database log" in str(refused.value)
    wal.unlink()  # a WAL not there (yet) owes nothing
    clock = Clock()
    guard = DiskGuard(
        FreeDiskFloor.parse("16MiB"), [tmp_path], owed=[wal], usage=disk.usage, monotonic=clock
    )
    guard.check("log lines")


def test_a_burst_within_the_ttl_asks_again_once_it_could_have_used_the_room(
    tmp_path: Path,
) -> None:
    """A log flood sends a second's worth of batches between two asks; the bytes let
    through count against the room above the floor, and a write that would not fit in
    what is left asks the disk again rather than trusting the kept answer."""
    disk = Disk(total=100 * GiB, free=1 * GiB + 10 * MiB + MiB // 2)
    guard = _guard(disk, Clock(), "1GiB", tmp_path)
    for _ in range(10):  # 10.5 MiB of room: ten writes of 1 MiB on one ask
        guard.check("log lines", 1 * MiB)
        disk.free -= 1 * MiB
    assert disk.asked == 1
    with pytest.raises(DiskBelowFloor, match=r"1\.0 MiB needed, 512\.0 KiB free above"):
        guard.check("log lines", 1 * MiB)  # would not fit: asked again, and refused
    assert disk.asked == 2
    guard.check("log lines", 1024)  # what still fits goes on
    assert disk.free - 1024 >= 1 * GiB


def test_a_burst_that_did_not_use_the_disk_is_let_through_after_asking(tmp_path: Path) -> None:
    """The count is an upper bound (a reused WAL takes no new space): asking again
    finds the room still there, and writes go on without waiting for the ttl."""
    disk = Disk(total=100 * GiB, free=1 * GiB + 4 * MiB)
    guard = _guard(disk, Clock(), "1GiB", tmp_path)
    for _ in range(12):
        guard.check("log lines", 1 * MiB)
    assert disk.asked == 3  # at first, then each time more than the 4 MiB room was let through


async def test_an_upload_counts_its_bytes_between_asks(tmp_path: Path) -> None:
    """A fast upload within one ttl: its chunks count against the room, so it stops
    near the floor rather than a second's worth of bytes below it."""
    disk = Disk(total=100 * GiB, free=1 * GiB + 4 * MiB)
    guard = _guard(disk, Clock(), "1GiB", tmp_path)

    async def body() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b"x" * MiB
            disk.free -= MiB

    received = 0
    with pytest.raises(DiskBelowFloor):
        async for chunk in guard.watch(body(), "artifact bytes"):
            received += len(chunk)
    assert received == 4 * MiB  # the room, and not a byte below the floor


def test_a_write_that_cannot_fit_is_refused_before_its_first_byte(tmp_path: Path) -> None:
    """An upload of a declared size, or a multipart upload's assembly, larger than the
    room above the floor: 507 at once, saying what it needs and what is free, and the
    disk is not said to be below the floor (smaller writes go on)."""
    disk = Disk(total=100 * GiB, free=3 * GiB)
    guard = _guard(disk, Clock(), "1GiB", tmp_path)
    with pytest.raises(DiskBelowFloor) as refused:
        guard.check("artifact bytes", 5 * GiB)
    detail = str(refused.value)
    assert "5.0 GiB needed, 2.0 GiB free above the 1.0 GiB kept free" in detail
    assert str(tmp_path) in detail and "--min-free-disk" in detail and "\n" not in detail
    assert guard.low() is None
    guard.check("artifact bytes", 1 * GiB)
