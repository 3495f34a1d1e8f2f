"""Byte ranges no byte of a file satisfies: 416 with ``Content-Range: bytes */<size>``
(RFC 9110 §14.1.2, §15.5.17), on every response served from a file (artifact downloads,
the UI's assets).

aiohttp's ``FileResponse`` serves one range and answers 416 to a start past the end and
to a range it cannot read (several ranges, last before first), but it reads a zero-length
suffix (``bytes=-0``) as ``-0 == 0``, "from byte 0", and sends the whole file as 206. So
each route that serves a file asks ``refuse_unsatisfiable`` first: every unsatisfiable
range gets the same 416, with the JSON ``detail`` the API's errors carry.
"""

from __future__ import annotations

import re

from aiohttp import hdrs, web

from tunefleet.http.errors import ApiError

# The one form aiohttp serves: a first byte, a last byte, or a suffix length. Up to 18
# digits (an exabyte): a longer number is past any file, and Python refuses to read one
# of thousands of digits (a header line may hold 8 KiB).
_ONE_RANGE = re.compile(r"bytes=(\d{0,18})-(\d{0,18})", re.ASCII | re.IGNORECASE)


def unsatisfiable(spec: str, size: int) -> bool:
    """Whether the Range header ``spec`` asks for nothing of a ``size``-byte file that
    aiohttp would send: a suffix of no bytes, a first byte at or past the end, or a form
    it does not serve (several ranges, last before first, not bytes). An empty file has
    no byte to send, so every range of it is unsatisfiable (as aiohttp answers)."""
    match = _ONE_RANGE.fullmatch(spec)
    if match is None:
        return True
    first, last = match.groups()
    if not first:
        return not last or int(last) == 0 or size == 0
    if last and int(last) < int(first):
        return True
    return int(first) >= size


def refuse_unsatisfiable(request: web.Request, size: int, modified_s: float) -> None:
    """Raise the 416 for a Range no byte of this file satisfies. A Range that If-Range
    (a date) sets aside is not looked at: the whole file is the answer, as aiohttp sends
    it. ``modified_s``: the file's mtime."""
    spec = request.headers.get(hdrs.RANGE)
    if spec is None or not unsatisfiable(spec, size):
        return
    if_range = request.if_range
    if if_range is not None and modified_s > if_range.timestamp():
        return
    raise ApiError(
        416,
        f"the range asks for no byte of this {size}-byte object; send one range such as "
        f"bytes=0-{max(size - 1, 0)}, bytes=N- with N below {size}, or bytes=-N with N > 0",
        headers={hdrs.CONTENT_RANGE: f"bytes */{size}"},
    )
