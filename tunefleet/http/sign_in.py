"""Checking a person's password sign-in: both throttles, then the argon2id hash.

A failure counts against the client's address (the one throttle every credential shares,
http/auth_throttle.py) and against the user name (a second ``AuthThrottle`` keyed by
name: past its budget, that name gets 429 from every address until its window closes).
Each throttle records its window's first failure on its own and sums up the rest when
the window closes (``auth.failed_window``), so a guesser costs neither disk nor log.
An unknown name, a user without a password and a wrong password get the same answer
after the same work, so sign-in does not tell which names exist.
"""

from __future__ import annotations

import asyncio
import math

from aiohttp import web

from tunefleet.http.auth import admit_credential, count_auth_failure, refuse_credential
from tunefleet.http.auth_throttle import AuthThrottle
from tunefleet.http.errors import ApiError
from tunefleet.http.passwords import password_matches
from tunefleet.storage.rows import UserRow
from tunefleet.storage.store import Store

USER_THROTTLE_KEY: web.AppKey[AuthThrottle] = web.AppKey("tunefleet_user_throttle")
# Changing one's password: the caller is signed in, so a wrong current password is a
# refusal of the change (403), not of who they are (a 401 would sign the page out).
WRONG_CURRENT_PASSWORD = (
    "The current password is wrong (a user without one cannot change it: an admin sets "
    "the first with tunefleet users passwd NAME)"
)
WRONG_PASSWORD = (
    "Wrong user name or password (a user without a password signs in with a token until "
    "an admin sets one: tunefleet users passwd NAME)"
)


def _user_key(name: str) -> str:
    return f"user:{name[:128]}"


def _user_throttle(request: web.Request) -> AuthThrottle | None:
    throttle = request.app.get(USER_THROTTLE_KEY)
    return throttle if throttle is not None else request.config_dict.get(USER_THROTTLE_KEY)


def admit_user(request: web.Request, name: str) -> None:
    """429 before any lookup when the address or the user name is past its budget."""
    admit_credential(request, "password", None)
    throttle = _user_throttle(request)
    if throttle is None:
        return
    wait_s = throttle.wait_s(_user_key(name), None)
    if wait_s <= 0:
        return
    count_auth_failure(request, "password")
    throttle.refused_unchecked(_user_key(name), "password", f"{request.method} {request.path}")
    retry_after = max(1, math.ceil(wait_s))
    raise ApiError(
        429,
        f"too many failed sign-ins for user {name}; try again in {retry_after} s, or ask "
        "an admin to set a new password",
        headers={"Retry-After": str(retry_after)},
    )


async def check_password(
    request: web.Request, store: Store, name: str, password: str, *, confirming: bool = False
) -> UserRow:
    """The user whose password this is (disabled or not: the caller says which); 401
    after counting the failure otherwise (403 when ``confirming`` a signed-in user's)."""
    row = await store.users.user(name)
    stored = row.password_hash if row is not None else None
    matches = await asyncio.to_thread(password_matches, stored, password)
    if row is not None and matches:
        return row
    if row is None:
        reason = "unknown user"
    elif stored is None:
        reason = f"user {name} has no password"
    else:
        reason = f"wrong password for user {name}"
    await refuse_credential(request, "password", reason, None)
    throttle = _user_throttle(request)
    if throttle is not None:
        target = f"{request.method} {request.path}"
        throttle.failed(_user_key(name), "password", reason, target, None)
    if confirming:
        raise ApiError(403, WRONG_CURRENT_PASSWORD)
    raise ApiError(401, WRONG_PASSWORD)
