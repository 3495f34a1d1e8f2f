"""bench/cycle_calls.py: the server under profiled_server.py counts exactly the calls of
the window between its signals, and two runs' counts line up function by function."""

from __future__ import annotations

import cProfile
import json
import pstats
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench import cycle_calls  # noqa: E402


def test_paths_are_shortened_to_the_package_so_two_checkouts_line_up() -> None:
    short = cycle_calls._short
    assert short("/work/wt-a/tunefleet/http/auth.py") == "tunefleet/http/auth.py"
    assert short("/work/wt-b/tunefleet/http/auth.py") == "tunefleet/http/auth.py"
    site = "/work/wt-a/.venv/lib/python3.11/site-packages/aiohttp/web_app.py"
    assert short(site) == "aiohttp/web_app.py"
    assert short("/usr/lib/python3.11/asyncio/events.py") == "asyncio/events.py"
    assert short("~") == "~"


def _marked() -> None:
    pass


def test_calls_are_counted_per_unit_of_work_by_its_marker() -> None:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(4):
        _marked()
        len("x")
    profile.disable()
    calls = cycle_calls.calls_by_function(pstats.Stats(profile))
    marker = next(key for key in calls if key.endswith(":_marked"))
    per_unit = cycle_calls._per_unit(calls, marker)
    assert per_unit[marker] == 1.0
    assert per_unit["~:<built-in method builtins.len>"] == 1.0


def test_a_window_without_its_marker_is_refused_not_divided_by_zero() -> None:
    with pytest.raises(RuntimeError, match="nothing was measured"):
        cycle_calls._per_unit({"tunefleet/x.py:f": 3}, cycle_calls.CYCLE_MARKER)


def test_diff_lists_what_changed_per_cycle_and_per_heartbeat(tmp_path: Path) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps({"per_cycle": {"a:f": 2.0, "a:g": 1.0}, "per_heartbeat": {}}))
    new.write_text(json.dumps({"per_cycle": {"a:f": 2.0, "a:h": 3.0}, "per_heartbeat": {}}))
    text = cycle_calls.diff(old, new)
    assert "per_cycle: 3.0 → 5.0 calls (+2.0)" in text
    assert "+3.00  a:h" in text and "-1.00  a:g" in text
    assert "a:f" not in text  # unchanged


def test_the_profiled_server_runs_its_checkout_and_counts_its_window(tmp_path: Path) -> None:
    """profiled_server.py runs a module as `python -m` would; here a stand-in that waits
    to be told to stop, so the test needs no orchestrator."""
    out = tmp_path / "calls.prof"
    script = REPO_ROOT / "bench" / "profiled_server.py"
    code = (
        "import signal, sys, time\n"
        "done = []\n"
        "signal.signal(signal.SIGTERM, lambda *_: done.append(1))\n"
        "print('ready', flush=True)\n"
        "while not done:\n"
        "    time.sleep(0.01)\n"
    )
    (tmp_path / "tunefleet").mkdir()
    (tmp_path / "tunefleet" / "__init__.py").write_text("")
    (tmp_path / "tunefleet" / "__main__.py").write_text(code)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(out), "server"],
        cwd=tmp_path,  # its tunefleet is the stand-in: the working directory comes first
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.2)
        proc.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while not (out.exists() and out.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.02)
        calls = cycle_calls.calls_by_function(pstats.Stats(str(out)))
        assert calls.get("~:<built-in method time.sleep>", 0) >= 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    assert proc.returncode == 0
