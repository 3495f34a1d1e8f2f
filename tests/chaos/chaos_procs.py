"""Process plumbing for the chaos suites: children, liveness, signals to whole groups.

The agent starts each trainer in its own session (its own process group, pgid = pid), so
"the agent's host" is the agent process plus the process group of each of its children.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is not None and stat[1] == pid and stat[0] != "Z":
            found.append(int(entry.name))
    return sorted(found)


def alive(pid: int) -> bool:
    """Running (or stopped), not gone and not a zombie waiting to be reaped."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal a whole process group; False when it is already gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def signal_pid(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """Wait (bounded) for processes to end; the ones still alive are returned."""
    deadline = time.monotonic() + timeout_s
    left = [pid for pid in pids if alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [pid for pid in left if alive(pid)]
    return left


def end_processes(pids: list[int], grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL whatever is left after ``grace_s``."""
    for pid in pids:
        with contextlib.suppress(PermissionError):
            signal_pid(pid, signal.SIGTERM)
            signal_pid(pid, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
    for pid in wait_gone(pids, grace_s):
        with contextlib.suppress(PermissionError):
            signal_pid(pid, signal.SIGKILL)
    wait_gone(pids, grace_s)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a process, or None when it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself hold spaces or parentheses.
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[1])
