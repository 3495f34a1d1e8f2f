"""Self-signed certificate made once and reused; contexts; a real HTTPS loopback server."""

from __future__ import annotations

import ipaddress
import ssl
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from structlog.testing import capture_logs

from tunefleet.http import tls
from tunefleet.http.tls import (
    CertPaths,
    TlsError,
    ensure_self_signed,
    fingerprint,
    server_ssl_context,
)
from tunefleet.protocol.tls import client_ssl_context


def load(paths: CertPaths) -> x509.Certificate:
    return x509.load_pem_x509_certificate(paths.cert.read_bytes())


def sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return (
        set(ext.get_values_for_type(x509.DNSName)),
        {str(ip) for ip in ext.get_values_for_type(x509.IPAddress)},
    )


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> CertPaths:
    return ensure_self_signed(tmp_path_factory.mktemp("data") / "tls", ["fleet.example.com"])


def test_generated_files_key_mode_and_sans(cert: CertPaths) -> None:
    assert cert.cert.name == "cert.pem"
    assert cert.key.name == "key.pem"
    assert stat.S_IMODE(cert.key.stat().st_mode) == 0o600
    dns, ips = sans(load(cert))
    assert {"fleet.example.com", "localhost"} <= dns
    assert {"127.0.0.1", "::1"} <= ips


def test_ten_year_validity(cert: CertPaths) -> None:
    c = load(cert)
    lifetime = c.not_valid_after_utc - c.not_valid_before_utc
    assert 3649 <= lifetime.days <= 3651


def test_generated_once_then_reused(tmp_path: Path) -> None:
    first = ensure_self_signed(tmp_path, ["a.example"])
    cert_bytes, key_bytes = first.cert.read_bytes(), first.key.read_bytes()
    second = ensure_self_signed(tmp_path, ["a.example"])
    assert second == first
    assert second.cert.read_bytes() == cert_bytes
    assert second.key.read_bytes() == key_bytes
    # Another directory gets its own certificate.
    assert ensure_self_signed(tmp_path / "other", ["a.example"]).fingerprint_sha256 != (
        first.fingerprint_sha256
    )


def test_fingerprint_is_stable_and_matches_the_der_digest(cert: CertPaths) -> None:
    expected = load(cert).fingerprint(hashes.SHA256()).hex().upper()
    assert fingerprint(cert.cert) == fingerprint(cert.cert) == cert.fingerprint_sha256
    assert cert.fingerprint_sha256.replace(":", "") == expected
    assert len(cert.fingerprint_sha256.split(":")) == 32


def test_ip_hostname_becomes_an_ip_san(tmp_path: Path) -> None:
    dns, ips = sans(load(ensure_self_signed(tmp_path, ["10.1.2.3", "LOCALHOST"])))
    assert "10.1.2.3" in ips
    assert "10.1.2.3" not in dns
    assert [d.lower() for d in dns].count("localhost") == 1


def test_wildcard_listen_address_names_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tls.socket, "gethostname", lambda: "gpu-box")
    monkeypatch.setattr(tls.socket, "getfqdn", lambda: "gpu-box.lab.example")
    dns, ips = sans(load(ensure_self_signed(tmp_path, ["0.0.0.0"])))
    assert {"gpu-box", "gpu-box.lab.example", "localhost"} <= dns
    assert "0.0.0.0" not in ips


def test_existing_cert_missing_a_hostname_is_kept_with_a_warning(tmp_path: Path) -> None:
    first = ensure_self_signed(tmp_path, ["a.example"])
    with capture_logs() as logs:
        again = ensure_self_signed(tmp_path, ["b.example", "a.example"])
    assert again.fingerprint_sha256 == first.fingerprint_sha256
    assert [(e["log_level"], e["missing"]) for e in logs] == [("warning", ["b.example"])]


@pytest.mark.parametrize("survivor", ["cert.pem", "key.pem"])
def test_half_a_pair_is_refused(tmp_path: Path, survivor: str) -> None:
    ensure_self_signed(tmp_path, [])
    for name in ("cert.pem", "key.pem"):
        if name != survivor:
            (tmp_path / name).unlink()
    with pytest.raises(TlsError, match="exists without its pair"):
        ensure_self_signed(tmp_path, [])


def test_unreadable_certificate(tmp_path: Path) -> None:
    bad = tmp_path / "cert.pem"
    bad.write_text("not a certificate")
    with pytest.raises(TlsError, match="cannot read certificate"):
        fingerprint(bad)
    with pytest.raises(TlsError, match="cannot read certificate"):
        fingerprint(tmp_path / "missing.pem")


def test_server_context_refuses_below_tls_1_2(cert: CertPaths) -> None:
    context = server_ssl_context(cert.cert, cert.key)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.minimum_version > ssl.TLSVersion.TLSv1_1


def test_server_context_with_mismatched_or_missing_files(tmp_path: Path, cert: CertPaths) -> None:
    other = ensure_self_signed(tmp_path, [])
    with pytest.raises(TlsError, match="cannot load TLS certificate"):
        server_ssl_context(cert.cert, other.key)
    with pytest.raises(TlsError, match="cannot load TLS certificate"):
        server_ssl_context(tmp_path / "nope.pem", other.key)


def test_client_contexts(cert: CertPaths, tmp_path: Path) -> None:
    trusting = client_ssl_context(cert.cert, verify=True)
    assert trusting.verify_mode == ssl.CERT_REQUIRED
    assert trusting.check_hostname
    assert trusting.minimum_version == ssl.TLSVersion.TLSv1_2
    our_der = load(cert).public_bytes(serialization.Encoding.DER)
    assert our_der in trusting.get_ca_certs(binary_form=True)
    lax = client_ssl_context(None, verify=False)
    assert lax.verify_mode == ssl.CERT_NONE
    assert not lax.check_hostname
    assert client_ssl_context(None, verify=True).verify_mode == ssl.CERT_REQUIRED
    (tmp_path / "garbage.pem").write_text("garbage")
    with pytest.raises(TlsError, match="cannot load CA certificate"):
        client_ssl_context(tmp_path / "garbage.pem", verify=True)


# --- a real HTTPS server on loopback ----------------------------------------------


@pytest.fixture
async def https_url(cert: CertPaths) -> AsyncIterator[str]:
    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="hello")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl_context(cert.cert, cert.key))
    await site.start()
    host, port = runner.addresses[0][:2]
    assert ipaddress.ip_address(host).is_loopback
    try:
        yield f"https://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


async def test_client_that_trusts_the_certificate_is_served(
    https_url: str, cert: CertPaths
) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(https_url, ssl=client_ssl_context(cert.cert, verify=True)) as response,
    ):
        assert await response.text() == "hello"


async def test_client_that_does_not_trust_it_is_rejected(https_url: str, tmp_path: Path) -> None:
    stranger = ensure_self_signed(tmp_path, [])  # trusts a different certificate
    async with aiohttp.ClientSession() as session:
        for context in (
            client_ssl_context(stranger.cert, verify=True),
            ssl.create_default_context(),
        ):
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with session.get(https_url, ssl=context):
                    pass


async def test_no_verify_client_is_served(https_url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(https_url, ssl=client_ssl_context(None, verify=False)) as response,
    ):
        assert response.status == 200


async def test_plain_http_client_gets_no_answer(https_url: str) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(https_url.replace("https", "http")) as response:
                await response.read()
