"""The TLS options against a real `tunefleet server --ssl` (its self-signed certificate),
and `audit verify` on a chain someone edited behind the orchestrator's back."""

from __future__ import annotations

import json
import sqlite3
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tests.e2e.harness import ADMIN_TOKEN, ApiError, Orchestrator
from tunefleet.cli.main import cli

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
Invoke = Callable[..., Result]


@dataclass
class TlsOrchestrator(Orchestrator):
    """The harness's orchestrator with --ssl; its own readiness check trusts any cert."""

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, token: str | None = None
    ) -> Any:
        request = urllib.request.Request(self.url + path, method=method)
        context = ssl._create_unverified_context()
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            raise ApiError(error.code, json.loads(error.read() or b"{}")) from None


@pytest.fixture(scope="module")
def tls_orchestrator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsOrchestrator]:
    root = tmp_path_factory.mktemp("tls")
    orch = TlsOrchestrator(root / "data", root / "configs", extra_args=["--ssl"])
    orch.start()
    yield orch
    orch.stop()


def test_a_self_signed_certificate_fails_verification_with_what_to_do(
    tf: Invoke, tls_orchestrator: TlsOrchestrator
) -> None:
    result = tf("workers", "list", url=tls_orchestrator.url)
    assert result.exit_code == 4
    assert f"TLS certificate verification failed for {tls_orchestrator.url}" in result.stderr
    assert "--ca-cert <data-dir>/tls/cert.pem" in result.stderr
    assert "--ssl-no-verify" in result.stderr


def test_ca_cert_and_ssl_no_verify_connect(tf: Invoke, tls_orchestrator: TlsOrchestrator) -> None:
    cert = tls_orchestrator.data_dir / "tls" / "cert.pem"
    trusted = tf("workers", "list", "--ca-cert", str(cert), url=tls_orchestrator.url)
    assert trusted.exit_code == 0, trusted.output
    assert "No workers." in trusted.stdout
    unverified = tf("tokens", "list", "--ssl-no-verify", url=tls_orchestrator.url)
    assert unverified.exit_code == 0, unverified.output
    assert "admin" in unverified.stdout


def test_ca_cert_from_the_environment(tls_orchestrator: TlsOrchestrator) -> None:
    env = {
        "TUNEFLEET_URL": tls_orchestrator.url,
        "TUNEFLEET_TOKEN": ADMIN_TOKEN,
        "TUNEFLEET_CA_CERT": str(tls_orchestrator.data_dir / "tls" / "cert.pem"),
    }
    result = CliRunner(env=env).invoke(cli, ["audit", "verify"])
    assert result.exit_code == 0, result.output


def test_audit_verify_exits_1_when_the_chain_was_edited(
    tf: Invoke, tls_orchestrator: TlsOrchestrator, tmp_path: Path
) -> None:
    insecure = ("--ssl-no-verify",)
    assert tf("workers", "create", "edited", *insecure, url=tls_orchestrator.url).exit_code == 0
    with sqlite3.connect(tls_orchestrator.data_dir / "tunefleet.db") as db:
        first = db.execute("SELECT min(id) FROM audit_event").fetchone()[0]
        db.execute("UPDATE audit_event SET outcome = 'forged' WHERE id = ?", (first,))
    result = tf("audit", "verify", *insecure, url=tls_orchestrator.url)
    assert result.exit_code == 1
    assert result.stdout.startswith(f"The audit chain is broken at event {first}:")
    as_json = tf("audit", "verify", "--json", *insecure, url=tls_orchestrator.url)
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout) == {"ok": False, "first_bad_id": first}
