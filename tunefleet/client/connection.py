"""Where the orchestrator is and how to talk to it: URLs, token, TLS trust.

The command line and Python callers read the same environment variables, so a shell that
works for ``tunefleet jobs list`` works for a notebook too.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tunefleet.client.errors import (
    ENV_CA_CERT,
    ENV_SSL_NO_VERIFY,
    ENV_TOKEN,
    ENV_URL,
    SettingsError,
)

DEFAULT_URL = "http://127.0.0.1:8001"
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})


def check_urls(value: str) -> str:
    """One URL, or several separated by commas (an active orchestrator and its standbys),
    normalised; raises ``SettingsError`` for one that is not http(s)://host."""
    urls = [part.strip() for part in value.split(",")]
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SettingsError(
                f"{url!r} is not an http:// or https:// URL (e.g. {DEFAULT_URL}; several "
                "orchestrators: URL1,URL2)"
            )
    return ",".join(urls)


@dataclass(frozen=True, slots=True)
class Connection:
    """Where the orchestrator is and how to talk to it.

    ``url`` is one base URL or several separated by commas: one active orchestrator and
    its standbys, tried in turn (docs/client.md, "High availability").
    """

    url: str = DEFAULT_URL
    token: str | None = None
    ca_cert: Path | None = None
    verify: bool = True

    @classmethod
    def resolve(
        cls,
        url: str | Sequence[str] | None = None,
        token: str | None = None,
        ca_cert: str | Path | None = None,
        verify: bool | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Connection:
        """The arguments given, else ``TUNEFLEET_URL``, ``TUNEFLEET_TOKEN``,
        ``TUNEFLEET_CA_CERT`` and ``TUNEFLEET_SSL_NO_VERIFY``, else the defaults."""
        env = os.environ if environ is None else environ
        if url is None:
            url = env.get(ENV_URL) or DEFAULT_URL
        elif not isinstance(url, str):
            url = ",".join(url)
        if token is None:
            token = env.get(ENV_TOKEN)
        if ca_cert is None and env.get(ENV_CA_CERT):
            ca_cert = env[ENV_CA_CERT]
        if verify is None:
            verify = env.get(ENV_SSL_NO_VERIFY, "").strip().lower() not in _TRUE
        return cls(
            url=check_urls(url),
            token=(token or "").strip() or None,
            ca_cert=Path(ca_cert) if ca_cert is not None else None,
            verify=verify,
        )

    @property
    def base_url(self) -> str:
        return self.urls[0]

    @property
    def urls(self) -> tuple[str, ...]:
        """Several orchestrators (one active, the others standing by) are comma-separated."""
        return tuple(part.strip().rstrip("/") for part in self.url.split(",") if part.strip())

    def at(self, url: str) -> Connection:
        """The same connection to one of its URLs (what messages name)."""
        return dataclasses.replace(self, url=url)
