"""``python -m tunefleet ...`` with cProfile on its event loop's thread, switched on by
SIGUSR1 and off by SIGUSR2, which also writes the stats to the path given first:

    python bench/profiled_server.py OUT.prof server --port ... (tunefleet's own arguments)

For ``cycle_calls``: the calls a window of load makes are counted exactly, whatever else
the machine runs. Only the main thread is profiled (the database thread's work shows in
``cycle_cpu``). Run as a file, so it starts from any working directory.
"""

from __future__ import annotations

import cProfile
import os
import runpy
import signal
import sys
from types import FrameType


def main() -> None:
    out, args = sys.argv[1], sys.argv[2:]
    profiles = [cProfile.Profile()]

    def start(_signum: int, _frame: FrameType | None) -> None:
        profiles[0] = cProfile.Profile()  # each window counted afresh
        profiles[0].enable()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        profiles[0].disable()
        profiles[0].dump_stats(out)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = ["tunefleet", *args]
    # What `python -m` puts first: the working directory, so the checkout it runs in is
    # the one measured, whatever the virtual environment's editable install points at.
    sys.path[0] = os.getcwd()
    runpy.run_module("tunefleet", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
