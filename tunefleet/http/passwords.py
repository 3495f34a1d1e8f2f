"""Passwords of people signing in to the web UI (issue 24): argon2id, through argon2-cffi.

Only the hash is stored (users.password_hash); a user without one cannot sign in with a
password (there are no default passwords). Hashing costs tens of milliseconds of CPU on
purpose, so callers run it off the event loop (``asyncio.to_thread``).
"""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

MIN_PASSWORD_CHARS = 10
MAX_PASSWORD_CHARS = 1024  # argon2 takes any length; this bounds the work one request asks

_HASHER = PasswordHasher()  # argon2id with the library's current recommended cost
# Verified against when the user is unknown or has no password, so that answering takes
# as long as a wrong password does and the timing does not tell which names exist.
_DUMMY_HASH = _HASHER.hash("no user has this password, it only takes time")


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


def password_matches(stored_hash: str | None, password: str) -> bool:
    """Whether ``password`` is the one ``stored_hash`` was made from; False (after the
    same work) when there is no hash."""
    try:
        return _HASHER.verify(stored_hash or _DUMMY_HASH, password) and stored_hash is not None
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def password_problem(password: str) -> str | None:
    """Why ``password`` may not be set, or None."""
    if len(password) < MIN_PASSWORD_CHARS:
        return f"a password needs at least {MIN_PASSWORD_CHARS} characters"
    if len(password) > MAX_PASSWORD_CHARS:
        return f"a password may have at most {MAX_PASSWORD_CHARS} characters"
    if not password.strip():
        return "a password cannot be only spaces"
    return None
