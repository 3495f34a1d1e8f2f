"""Several orchestrator URLs in --url / TUNEFLEET_URL: a command reaches the active one
whether the first URL is a standby (503 naming the active one) or down; a standby alone
is an error saying what to do; a bad list is a usage error."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator

import pytest
from click.testing import Result

from tests.e2e.harness import Orchestrator, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
Invoke = Callable[..., Result]


@pytest.fixture
def standby(orchestrator: Orchestrator) -> Iterator[str]:
    """A process that answers every request as a standby of `orchestrator` would."""
    seen: list[str] = []

    class Standby(http.server.BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            seen.append(self.path)
            body = json.dumps(
                {
                    "detail": "this orchestrator is a standby; the active orchestrator is at "
                    f"{orchestrator.url}: send requests there",
                    "active_url": orchestrator.url,
                }
            ).encode()
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _refuse

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Standby)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    assert seen, "the standby was never asked"


def test_a_standby_first_in_the_list_sends_the_command_to_the_active_one(
    tf: Invoke, standby: str, orchestrator: Orchestrator
) -> None:
    result = tf("workers", "create", "via-standby", url=f"{standby},{orchestrator.url}")
    assert result.exit_code == 0, result.output
    names = [w["name"] for w in orchestrator.request("GET", "/api/admin/workers")["workers"]]
    assert names.count("via-standby") == 1  # run once, by the active one


def test_a_dead_first_url_is_skipped(tf: Invoke, orchestrator: Orchestrator) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    result = tf("jobs", "list", url=f"{dead}, {orchestrator.url}")
    assert result.exit_code == 0, result.output


def test_a_standby_alone_says_to_list_every_orchestrator(tf: Invoke, standby: str) -> None:
    result = tf("jobs", "list", url=standby)
    assert result.exit_code == 4
    assert result.stderr.startswith(f"Error: The orchestrator at {standby} is not the active one")
    assert "separated by commas" in result.stderr


def test_a_bad_entry_in_the_list_is_a_usage_error(tf: Invoke, orchestrator: Orchestrator) -> None:
    result = tf("jobs", "list", url=f"{orchestrator.url},ftp://elsewhere")
    assert result.exit_code == 2
    assert "'ftp://elsewhere' is not an http:// or https:// URL" in result.stderr
