"""What is at the other end when the answer is not the orchestrator's: an HTML page, a
server that implements nothing we send, or HTTPS where the URL says http://.

Raw pages are never shown to the user (a proxy's error page is kilobytes of markup);
they are named by kind and title.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from typing import Any
from urllib.parse import urlsplit

_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")
_PROBE_TIMEOUT_S = 5.0


def looks_like_html(text: str) -> bool:
    head = text.lstrip()[:512].lower()
    return head.startswith(("<!doctype html", "<html", "<?xml")) or "<body" in head


def describe_body(data: Any, limit: int = 200) -> str:
    """A one-line description of an answer body for a message: the JSON ``detail``, an
    HTML page by its title, or plain text cut short."""
    if isinstance(data, dict) and isinstance(data.get("detail"), str):
        return _SPACE.sub(" ", data["detail"]).strip()[:limit]
    if not data:
        return "(no detail)"
    text = data if isinstance(data, str) else str(data)
    if looks_like_html(text):
        match = _TITLE.search(text)
        title = _SPACE.sub(" ", _TAG.sub("", match.group(1))).strip() if match else ""
        return f"an HTML page titled {title[:80]!r}" if title else "an HTML page"
    return _SPACE.sub(" ", text).strip()[:limit]


async def speaks_tls(url: str) -> bool:
    """Whether the host and port of an http:// URL complete a TLS handshake, i.e. the
    URL should have said https://. Verification is off: only the protocol is asked."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context), _PROBE_TIMEOUT_S
        )
    except (OSError, ssl.SSLError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), 1.0)
    return True
