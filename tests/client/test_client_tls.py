"""The client's TLS options against a real `tunefleet server --ssl` (its self-signed
certificate): refused with what to do, trusted with ca_cert=, or with verify=False."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cli.test_cli_tls import TlsOrchestrator
from tests.e2e.harness import ADMIN_TOKEN
from tunefleet.client import Client, TlsFailure

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def tls_orchestrator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsOrchestrator]:
    root = tmp_path_factory.mktemp("client-tls")
    orch = TlsOrchestrator(root / "data", root / "configs", extra_args=["--ssl"])
    orch.start()
    yield orch
    orch.stop()


def test_a_self_signed_certificate_is_refused_then_trusted(
    tls_orchestrator: TlsOrchestrator, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = tls_orchestrator.url
    with Client(url, token=ADMIN_TOKEN) as tf, pytest.raises(TlsFailure) as refused:
        tf.whoami()
    assert f"TLS certificate verification failed for {url}" in str(refused.value)
    assert "ca_cert=<data-dir>/tls/cert.pem (or TUNEFLEET_CA_CERT)" in str(refused.value)

    cert = tls_orchestrator.data_dir / "tls" / "cert.pem"
    with Client(url, token=ADMIN_TOKEN, ca_cert=cert) as tf:
        assert "admin.workers" in tf.whoami()["permissions"]
    with Client(url, token=ADMIN_TOKEN, verify=False) as tf:
        assert "admin.workers" in tf.whoami()["permissions"]
    monkeypatch.setenv("TUNEFLEET_CA_CERT", str(cert))
    with Client(url, token=ADMIN_TOKEN) as tf:  # the command line's variable works too
        assert "admin.workers" in tf.whoami()["permissions"]
