"""TLS for the orchestrator: a self-signed certificate made once, and its SSL context.

The clients' context (agent, CLI) is tunefleet/protocol/tls.py.

The certificate is generated on the first ``--ssl`` start and reused afterwards, so
its fingerprint stays the same and workers that trust it keep trusting it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

import structlog
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tunefleet.protocol.tls import TlsError

__all__ = [
    "CertPaths",
    "TlsError",
    "ensure_self_signed",
    "fingerprint",
    "is_self_signed",
    "server_ssl_context",
]

log = structlog.get_logger(__name__)

CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
VALIDITY_DAYS = 3650
_WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


@dataclass(frozen=True, slots=True)
class CertPaths:
    cert: Path
    key: Path
    fingerprint_sha256: str


def ensure_self_signed(directory: Path, hostnames: list[str]) -> CertPaths:
    """The self-signed certificate in ``directory`` (``cert.pem``, ``key.pem``), made
    now if neither file exists. The server passes ``<data_dir>/tls``.

    SANs: each hostname (IP literals as IP addresses), 127.0.0.1, ::1 and localhost;
    a wildcard listen address (0.0.0.0, ::) is replaced by this machine's host names,
    which is what remote workers will connect to.
    """
    cert_path, key_path = directory / CERT_FILE, directory / KEY_FILE
    if cert_path.exists() and key_path.exists():
        _warn_if_names_missing(cert_path, hostnames)
        return CertPaths(cert_path, key_path, fingerprint(cert_path))
    if cert_path.exists() or key_path.exists():
        present = cert_path if cert_path.exists() else key_path
        raise TlsError(
            f"{present} exists without its pair; remove it to generate a new self-signed "
            "certificate (workers will need the new fingerprint), or restore the other file"
        )
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _build_certificate(key, _subject_names(hostnames))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Key first: a cert without its key is the state we refuse above.
    _write_atomically(key_path, key_pem, mode=0o600)
    _write_atomically(cert_path, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)
    paths = CertPaths(cert_path, key_path, fingerprint(cert_path))
    log.info(
        "generated self-signed TLS certificate",
        cert=str(cert_path),
        fingerprint_sha256=paths.fingerprint_sha256,
    )
    return paths


def fingerprint(cert_path: Path) -> str:
    """SHA-256 of the certificate's DER form as colon-separated hex (``AB:CD:…``), the
    way ``openssl x509 -fingerprint -sha256`` prints it."""
    digest = _load_cert(cert_path).fingerprint(hashes.SHA256())
    return ":".join(f"{byte:02X}" for byte in digest)


def is_self_signed(cert_path: Path) -> bool:
    """Whether the certificate signed itself: then clients must be given it to trust
    (``--ca-cert``), since no CA they know vouches for it."""
    cert = _load_cert(cert_path)
    return cert.issuer == cert.subject


def server_ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context that refuses anything older than TLS 1.2."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    except (OSError, ssl.SSLError) as error:
        raise TlsError(f"cannot load TLS certificate {cert} with key {key}: {error}") from error
    return context


# --- helpers ----------------------------------------------------------------------


def _subject_names(hostnames: list[str]) -> list[x509.GeneralName]:
    wanted: list[str] = []
    for host in hostnames:
        if host.strip() in _WILDCARD_HOSTS:
            wanted += [socket.gethostname(), socket.getfqdn()]
        else:
            wanted.append(host.strip())
    wanted += ["localhost", "127.0.0.1", "::1"]
    names: list[x509.GeneralName] = []
    seen: set[str] = set()
    for host in wanted:
        if not host or host.lower() in seen:
            continue
        seen.add(host.lower())
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _build_certificate(
    key: ec.EllipticCurvePrivateKey, names: list[x509.GeneralName]
) -> x509.Certificate:
    first_dns = next((n.value for n in names if isinstance(n, x509.DNSName)), "localhost")
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tunefleet"),
            x509.NameAttribute(NameOID.COMMON_NAME, first_dns),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate clock skew
        .not_valid_after(now + datetime.timedelta(days=VALIDITY_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        # A CA so clients can trust it as their anchor; the path length of 0 keeps it
        # from signing anything but itself.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Write to a temporary file created with ``mode`` (so the key is never readable by
    others, not even for an instant), then rename it into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # the umask may have narrowed or widened it
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _load_cert(cert_path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(cert_path.read_bytes())
    except (OSError, ValueError) as error:
        raise TlsError(f"cannot read certificate {cert_path}: {error}") from error


def _warn_if_names_missing(cert_path: Path, hostnames: list[str]) -> None:
    try:
        san = _load_cert(cert_path).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return
    present = {str(v).lower() for v in san.value.get_values_for_type(x509.DNSName)}
    present |= {str(v) for v in san.value.get_values_for_type(x509.IPAddress)}
    missing = [h for h in hostnames if h not in _WILDCARD_HOSTS and h.lower() not in present]
    if missing:
        log.warning(
            "existing TLS certificate does not name these hosts; delete it to regenerate",
            cert=str(cert_path),
            missing=missing,
        )
