"""The chaos suites' trainer: tunefleet's example trainer, bracketed by markers.

The agent runs it as the job's command (``python tests/chaos/chaos_trainer.py``). Before
training it appends a ``start`` line to the file named by the config key
``chaos_markers_path``, and an ``end`` line (with the exit code) when training returns or
raises, so the invariant checker knows, from the trainer's own side, when each attempt's
process ran, where (its job directory names the agent's work dir) and under which agent
process (its parent). A process killed with SIGKILL writes no ``end`` line.

Everything else is the example trainer unchanged, including its ledger line
(``ledger_path``) written once per successful run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from tunefleet.examples import tiny_trainer


def append_line(path: str, entry: dict[str, Any]) -> None:
    # One O_APPEND write per line: the agents' trainers share this file.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)


def main() -> int:
    config = tiny_trainer.load_config(None)
    markers = str(config["chaos_markers_path"])
    who = {
        "job_id": os.environ.get("TUNEFLEET_JOB_ID"),
        "attempt": int(os.environ.get("TUNEFLEET_ATTEMPT") or 0),
        "job_dir": os.environ.get("TUNEFLEET_JOB_DIR"),
        "pid": os.getpid(),
        "agent_pid": os.getppid(),
    }
    append_line(markers, {**who, "event": "start", "at": time.time()})
    code: int | str = "raised"
    try:
        code = tiny_trainer.main([])
        return code
    finally:
        append_line(markers, {**who, "event": "end", "at": time.time(), "exit_code": code})


if __name__ == "__main__":
    sys.exit(main())
