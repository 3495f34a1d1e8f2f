"""Comparing and redacting secret tokens, and telling their kinds apart, for the
orchestrator's authentication.

Making and hashing tokens, and their prefixes, live in tunefleet/tokens.py (the agent,
the CLI and the actors use them too); they are imported here so the HTTP room keeps one
place to import token helpers from. Logs and audit records get ``redact(token)``, never
the token itself.
"""

from __future__ import annotations

import hmac
from typing import Literal

from tunefleet.tokens import (
    API_TOKEN_PREFIX,
    TOKEN_RANDOM_BYTES,
    UPLOAD_TOKEN_PREFIX,
    WORKER_TOKEN_PREFIX,
    hash_token,
    new_api_token,
    new_upload_token,
    new_worker_token,
)

__all__ = [
    "API_TOKEN_PREFIX",
    "TOKEN_RANDOM_BYTES",
    "UPLOAD_TOKEN_PREFIX",
    "WORKER_TOKEN_PREFIX",
    "TokenKind",
    "hash_matches",
    "hash_token",
    "looks_like",
    "looks_like_api_token",
    "looks_like_worker_token",
    "new_api_token",
    "new_upload_token",
    "new_worker_token",
    "redact",
    "tokens_equal",
]

_ENCODED_LENGTH = 43
_URLSAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

TokenKind = Literal["worker", "api"]


def hash_matches(token: str, token_hash: str) -> bool:
    """Whether ``token`` hashes to ``token_hash``, compared in constant time."""
    return hmac.compare_digest(hash_token(token), token_hash.lower())


def tokens_equal(a: str, b: str) -> bool:
    """Constant-time equality for two secrets (e.g. a configured bootstrap token)."""
    return hmac.compare_digest(
        a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass")
    )


def _well_formed(token: str, prefix: str) -> bool:
    body = token[len(prefix) :]
    return (
        token.startswith(prefix)
        and len(body) == _ENCODED_LENGTH
        and all(ch in _URLSAFE for ch in body)
    )


def looks_like_worker_token(token: str) -> bool:
    """Whether ``token`` has the shape tunefleet gives worker tokens (not whether it is valid)."""
    return _well_formed(token, WORKER_TOKEN_PREFIX)


def looks_like_api_token(token: str) -> bool:
    """Whether ``token`` has the shape tunefleet gives API tokens (not whether it is valid)."""
    return _well_formed(token, API_TOKEN_PREFIX)


def looks_like(token: str) -> TokenKind | None:
    """Which kind of tunefleet token this looks like, or None: for helpful error hints."""
    if looks_like_worker_token(token):
        return "worker"
    if looks_like_api_token(token):
        return "api"
    return None


def redact(token: str | None) -> str:
    """A form safe for logs and screens: the known prefix and the last four characters,
    e.g. ``wt_…abcd``. Short or unknown strings keep even less."""
    if not token:
        return "<none>"
    prefix = next(
        (
            p
            for p in (WORKER_TOKEN_PREFIX, API_TOKEN_PREFIX, UPLOAD_TOKEN_PREFIX)
            if token.startswith(p)
        ),
        "",
    )
    rest = token[len(prefix) :]
    # Showing four characters of a short secret would show most of it.
    tail = rest[-4:] if len(rest) >= 16 else ""
    return f"{prefix}…{tail}"
