"""Where a webhook may be sent (SSRF): http or https, no credentials in the URL, and by
default never to loopback, link-local, private, shared, reserved or metadata addresses,
checked on the URL and again on each address the name resolves to when connecting
(sender.GuardedResolver), so a name that re-resolves to 127.0.0.1 (DNS rebinding) is
refused. ``--webhooks-allow-private`` lifts the address rule (tests, a LAN receiver)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

MAX_URL_LENGTH = 2048
# The cloud metadata services: refused even with --webhooks-allow-private.
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
ALLOW_PRIVATE_FLAG = "--webhooks-allow-private"


def address_refusal(address: str, *, allow_private: bool) -> str | None:
    """Why ``address`` (an IP literal) may not be a webhook's target; None when it may."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in METADATA_ADDRESSES:
        return f"{ip} is the cloud metadata address; webhooks may never target it"
    if allow_private:
        return None
    kinds = (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("private", ip.is_private),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
    )
    for kind, hit in kinds:
        if hit:
            return (
                f"{ip} is a {kind} address; webhooks go to public addresses unless the "
                f"server runs with {ALLOW_PRIVATE_FLAG}"
            )
    return None


def url_refusal(url: str, *, allow_private: bool) -> str | None:
    """Why ``url`` may not be a webhook's URL; None when it may (its name is checked
    again, resolved, at each connection)."""
    if len(url) > MAX_URL_LENGTH:
        return f"the URL is longer than {MAX_URL_LENGTH} characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        return f"not a valid URL: {error}"
    if parts.scheme not in ("http", "https"):
        return f"the URL must start with http:// or https://, not {parts.scheme or 'nothing'}"
    if parts.username is not None or parts.password is not None:
        return "the URL must not hold credentials (user:password@); sign with the secret"
    host = parts.hostname
    if not host:
        return "the URL has no host"
    del port  # only parsed, so that a bad port is refused here
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        if host == "localhost" or host.endswith(".localhost"):
            return address_refusal("127.0.0.1", allow_private=allow_private)
        return None  # a name: checked on each address it resolves to, at connect time
    return address_refusal(host, allow_private=allow_private)
