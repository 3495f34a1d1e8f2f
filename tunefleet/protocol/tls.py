"""The client side of TLS: the context an agent or the CLI connects with.

It lives with the protocol rather than with the orchestrator's TLS (tunefleet/http/tls.py,
which makes and serves certificates) because both clients need it and neither may depend
on the HTTP room.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from tunefleet.errors import TunefleetError


class TlsError(TunefleetError):
    """The certificate or key cannot be used (the message says which file and why)."""


def client_ssl_context(ca_cert: Path | None, verify: bool) -> ssl.SSLContext:
    """The context an agent or CLI uses: the system trust store, plus ``ca_cert`` when
    given (e.g. the orchestrator's self-signed ``cert.pem``), hostnames checked.
    ``verify=False`` accepts any certificate (``--ssl-no-verify``, development only)."""
    if verify:
        context = ssl.create_default_context()
        if ca_cert is not None:
            try:
                context.load_verify_locations(cafile=str(ca_cert))
            except (OSError, ssl.SSLError) as error:
                raise TlsError(f"cannot load CA certificate {ca_cert}: {error}") from error
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
