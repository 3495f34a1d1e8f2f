"""A bare-socket worker run inside a network namespace (``ip netns exec``): it
registers, opens its stream and prints each event's data as a JSON line, acknowledging
nothing. Killing the test's link to it leaves its socket open and silent, as a machine
that lost its network would.

    python -m tests.chaos.silent_peer_worker URL TOKEN WORKER_ID
"""

from __future__ import annotations

import json
import sys

from tests.e2e.raw_stream import RawStreamWorker


def main(url: str, token: str, worker_id: str) -> None:
    worker = RawStreamWorker(url, token, worker_id, name="silent")
    worker.register()
    worker.open_stream()
    print(json.dumps({"type": "stream_open"}), flush=True)
    while True:
        event = worker.next_event(timeout_s=3600)
        if event is not None:
            print(json.dumps(event), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
