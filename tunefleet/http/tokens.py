"""Secret tokens: making them, hashing them for storage, comparing and redacting them.

A token is shown once (in the response that creates it) and stored only as its SHA-256
hash, so a leaked database does not leak working credentials. Logs and audit records get
``redact(token)``, never the token itself.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Literal

WORKER_TOKEN_PREFIX = "wt_"
API_TOKEN_PREFIX = "tf_"
UPLOAD_TOKEN_PREFIX = "ut_"
# 32 random bytes, as DESIGN.md asks; token_urlsafe(32) is 43 characters long.
TOKEN_RANDOM_BYTES = 32
_ENCODED_LENGTH = 43
_URLSAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

TokenKind = Literal["worker", "api"]


def new_worker_token() -> str:
    """A fresh worker token: ``wt_`` and 32 URL-safe random bytes."""
    return WORKER_TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_RANDOM_BYTES)


def new_api_token() -> str:
    """A fresh API token for people and scripts: ``tf_`` and 32 URL-safe random bytes."""
    return API_TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_RANDOM_BYTES)


def new_upload_token() -> str:
    """A fresh upload token for one attempt of one job: ``ut_`` and 32 URL-safe random bytes."""
    return UPLOAD_TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_RANDOM_BYTES)


def hash_token(token: str) -> str:
    """The SHA-256 hex digest stored in place of the token.

    Plain SHA-256 (no salt, no slow hash) is right here: the tokens carry 256 random bits,
    so there is nothing to brute-force, and the hash must be a deterministic lookup key.
    """
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


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
