"""The agent's look at its cgroup's OOM kills (tunefleet/agent/oom_watch.py)."""

from __future__ import annotations

from pathlib import Path

from tunefleet.agent.oom_watch import OomWatch, memory_events_path, oom_kills


def test_a_rise_in_oom_kills_is_evidence(tmp_path: Path) -> None:
    events = tmp_path / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    watch = OomWatch(events)
    watch.start()
    assert watch.evidence() is None
    events.write_text("low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n")
    assert watch.evidence() == f"oom_kill 1 -> 2 in {events}"


def test_no_file_no_evidence_and_no_error(tmp_path: Path) -> None:
    watch = OomWatch(tmp_path / "absent", find=False)
    watch.start()
    assert watch.evidence() is None
    assert oom_kills(None) is None
    (tmp_path / "garbled").write_text("oom_kill lots\n")
    assert oom_kills(tmp_path / "garbled") is None


def test_the_cgroup_v2_path_is_read_from_proc(tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("12:cpu:/x\n")  # v1 only: nothing to read
    assert memory_events_path(cgroup) is None
    assert memory_events_path(tmp_path / "missing") is None
