"""Whether the kernel's OOM killer acted while a job ran: the agent's own cgroup (v2)
counts its kills in ``memory.events`` (``oom_kill N``). Read before and after each job;
a rise is the evidence the orchestrator needs to call a SIGKILL an infrastructure
failure (fsm/failure_kinds.py). Where the file cannot be read (cgroup v1, a container
without it) there is simply no evidence: never an error."""

from __future__ import annotations

from pathlib import Path

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def memory_events_path(proc_cgroup: Path = Path("/proc/self/cgroup")) -> Path | None:
    """This process's cgroup v2 ``memory.events``; None when not found."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            candidate = _CGROUP_ROOT / path.lstrip("/") / "memory.events"
            return candidate if candidate.is_file() else None
    return None


def oom_kills(events: Path | None) -> int | None:
    """The ``oom_kill`` count in ``events``; None when unreadable."""
    if events is None:
        return None
    try:
        text = events.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


class OomWatch:
    """``start()`` before a job, ``evidence()`` after: a line when kills rose, else None."""

    def __init__(self, events: Path | None = None, *, find: bool = True) -> None:
        self.events = events if events is not None or not find else memory_events_path()
        self._before: int | None = None

    def start(self) -> None:
        self._before = oom_kills(self.events)

    def evidence(self) -> str | None:
        after = oom_kills(self.events)
        if self._before is None or after is None or after <= self._before:
            return None
        return f"oom_kill {self._before} -> {after} in {self.events}"
