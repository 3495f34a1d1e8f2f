"""The messages and exit codes for what goes wrong between the command line and the
orchestrator: nothing listening, a wrong token, a token without the permission, TLS."""

from __future__ import annotations

import functools
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from tests.e2e.harness import ADMIN_TOKEN, Orchestrator, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
Invoke = Callable[..., Result]

EVERY_COMMAND = [
    ("workers", "list"),
    ("workers", "show", "w_x"),
    ("workers", "create", "nobody"),
    ("workers", "drain", "w_x"),
    ("workers", "resume", "w_x"),
    ("workers", "quarantine", "w_x"),
    ("workers", "release", "w_x"),
    ("workers", "rotate-token", "w_x"),
    ("workers", "delete", "w_x", "--yes"),
    ("jobs", "submit", "quick"),
    ("jobs", "list"),
    ("jobs", "show", "j_x"),
    ("jobs", "show", "j_x", "--follow"),
    ("jobs", "cancel", "j_x"),
    ("jobs", "logs", "j_x"),
    ("jobs", "logs", "j_x", "--follow"),
    ("tokens", "create", "t", "--permission", "queue.submit"),
    ("tokens", "list"),
    ("tokens", "revoke", "1"),
    ("audit", "list"),
    ("audit", "verify"),
]


@pytest.mark.parametrize("args", EVERY_COMMAND, ids=lambda a: "-".join(a[:2]))
def test_connection_refused_exits_4_saying_what_to_check(tf: Invoke, args: tuple[str, ...]) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = tf(*args, url=url)
    assert result.exit_code == 4, result.output
    assert result.stderr.startswith(
        f"Error: Cannot connect to the orchestrator at {url}: connection refused. "
        "Check --url (or TUNEFLEET_URL) and that `tunefleet server` is running there."
    )
    assert result.stdout == ""


def test_wrong_token_exits_4_with_the_401_message(tf: Invoke) -> None:
    result = tf("workers", "list", token="tf_not-a-real-token")
    assert result.exit_code == 4
    assert "rejected the API token (HTTP 401): it is unknown or revoked" in result.stderr
    assert "TUNEFLEET_TOKEN" in result.stderr


def test_a_worker_token_given_to_the_cli_says_an_api_token_is_needed(tf: Invoke) -> None:
    created = tf("workers", "create", "cli-token-mixup", "--json")
    assert created.exit_code == 0, created.output
    worker_token = json.loads(created.stdout)["token"]
    result = tf("workers", "list", token=worker_token)
    assert result.exit_code == 4
    assert "it is a worker token (wt_...), which only `tunefleet worker` uses" in result.stderr
    assert "Pass an API token (tf_...)" in result.stderr
    assert worker_token not in result.stderr


def test_no_token_exits_4_saying_how_to_give_one(tf: Invoke) -> None:
    result = tf("jobs", "list", token=None)
    assert result.exit_code == 4
    assert "No API token: pass --token or set TUNEFLEET_TOKEN" in result.stderr


def test_token_without_the_permission_exits_4_naming_it(tf: Invoke) -> None:
    created = tf("tokens", "create", "submit-only", "--permission", "queue.submit", "--json")
    assert created.exit_code == 0, created.output
    token = json.loads(created.stdout)["token"]
    for args, permission in [
        (("workers", "list"), "admin.workers"),
        (("tokens", "list"), "admin.workers"),
        (("audit", "verify"), "audit.read"),
    ]:
        result = tf(*args, token=token)
        assert result.exit_code == 4, result.output
        assert f"Permission denied: {permission} (HTTP 403)" in result.stderr
        assert f"tunefleet tokens create NAME --permission {permission}" in result.stderr
    allowed = tf("jobs", "list", token=token)  # reading the queue needs any token
    assert allowed.exit_code == 0


def test_a_token_cannot_grant_what_it_lacks(tf: Invoke) -> None:
    created = tf("tokens", "create", "fleet-admin", "--permission", "admin.workers", "--json")
    token = json.loads(created.stdout)["token"]
    granting = tf("tokens", "create", "x", "--permission", "audit.read", token=token)
    assert granting.exit_code == 4
    assert "Permission denied: cannot grant audit.read, which this token lacks" in granting.stderr
    assert "--permission audit.read" in granting.stderr


def test_token_option_wins_over_the_environment_and_is_stripped(tf: Invoke) -> None:
    result = tf("workers", "list", "--token", f"  {ADMIN_TOKEN}\n", token="tf_wrong")
    assert result.exit_code == 0, result.output


def test_a_url_that_is_not_http_is_a_usage_error(tf: Invoke) -> None:
    result = tf("workers", "list", url="127.0.0.1:8001")
    assert result.exit_code == 2
    assert "is not an http:// or https:// URL" in result.stderr


@pytest.fixture
def plain_web_server(tmp_path: Path) -> Iterator[str]:
    """Some other web server (HTML 404s), as a mistyped --url would reach."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_server_that_is_not_the_orchestrator_exits_4(tf: Invoke, plain_web_server: str) -> None:
    result = tf("jobs", "list", url=plain_web_server)
    assert result.exit_code == 4
    assert f"{plain_web_server} answered HTTP 404 with text/html" in result.stderr
    assert "not the orchestrator's JSON" in result.stderr


def test_https_to_a_plain_http_orchestrator_says_tls_failed(
    tf: Invoke, orchestrator: Orchestrator
) -> None:
    result = tf("workers", "list", url=orchestrator.url.replace("http://", "https://"))
    assert result.exit_code == 4
    assert "TLS handshake with https://127.0.0.1" in result.stderr
    assert "use an http:// URL" in result.stderr


def test_an_unreadable_ca_certificate_exits_4(tf: Invoke, tmp_path: Path) -> None:
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate")
    result = tf("workers", "list", "--ca-cert", str(bogus), url="https://127.0.0.1:1")
    assert result.exit_code == 4
    assert f"cannot load CA certificate {bogus}" in result.stderr
    assert "--ssl-no-verify" in result.stderr
