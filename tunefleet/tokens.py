"""Secret tokens as every side knows them: their prefixes, making them, hashing them.

A token is shown once (in the response that creates it) and stored only as its SHA-256
hash, so a leaked database does not leak working credentials. The agent and the CLI
read the prefixes (to say which kind of token a user passed), the actors make upload
tokens: none of them needs the HTTP room for that. Comparing and redacting stay with
the orchestrator's authentication (tunefleet/http/tokens.py).
"""

from __future__ import annotations

import hashlib
import secrets

WORKER_TOKEN_PREFIX = "wt_"
API_TOKEN_PREFIX = "tf_"
UPLOAD_TOKEN_PREFIX = "ut_"
# 32 random bytes, as DESIGN.md asks; token_urlsafe(32) is 43 characters long.
TOKEN_RANDOM_BYTES = 32


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
