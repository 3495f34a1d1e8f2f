"""A real, small filesystem for disk-full tests: a tmpfs of a few MiB mounted under the
test's tmp_path. Mounting needs root (or CAP_SYS_ADMIN); where it is not allowed the
test is skipped with the reason."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER_NAME = "filler.bin"
_CHUNK = b"\0" * 65536


@contextlib.contextmanager
def small_disk(where: Path, size_mib: int) -> Iterator[Path]:
    """A tmpfs of ``size_mib`` MiB mounted at ``where`` for the block, unmounted after."""
    where.mkdir(parents=True, exist_ok=True)
    mount = shutil.which("mount")
    if mount is None:
        pytest.skip("no mount command here: cannot make a small filesystem to fill")
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        reason = done.stderr.strip() or f"mount exited {done.returncode}"
        pytest.skip(f"cannot mount a tmpfs for a disk-full test (needs root): {reason}")
    try:
        yield where
    finally:
        # Lazy: a server process killed a moment ago may still hold a file open there.
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def fill(disk: Path, leave_bytes: int = 0) -> Path:
    """Write a filler file until at most ``leave_bytes`` are free on ``disk`` (or it is
    full); returns the file, whose removal frees the space again."""
    filler = disk / FILLER_NAME
    with filler.open("ab", buffering=0) as out:
        while (free := shutil.disk_usage(disk).free) > leave_bytes:
            try:
                out.write(_CHUNK[: max(1, min(len(_CHUNK), free - leave_bytes))])
            except OSError:
                break
        with contextlib.suppress(OSError):
            os.fsync(out.fileno())
    return filler


def free_bytes(disk: Path) -> int:
    return shutil.disk_usage(disk).free
