"""Byte ranges no byte of a file satisfies: 416 with ``Content-Range: bytes */<size>``
(RFC 9110 §14.1.2, §15.5.17), on every response aiohttp serves from a file (artifact
downloads, the UI's assets).

aiohttp's ``FileResponse`` serves one range and already answers 416 to a start past the
end and to a range it cannot read (several ranges, last before first). It reads a
zero-length suffix (``bytes=-0``) as ``-0 == 0``, "from byte 0", and sends the whole file
as 206. A suffix of no bytes is unsatisfiable whatever the file's size, so the front door
spells it as a range aiohttp refuses (``respell_zero_suffix``); its If-Range handling is
kept. The artifact routes answer every unsatisfiable range themselves, with the JSON
``detail`` the API's errors carry (``refuse_unsatisfiable``).
"""

from __future__ import annotations

import re

from aiohttp import hdrs, web
from multidict import CIMultiDict

from tunefleet.http.errors import ApiError

# The one form aiohttp serves: a first byte, a last byte, or a suffix length.
_ONE_RANGE = re.compile(r"bytes=(\d*)-(\d*)", re.ASCII | re.IGNORECASE)
_ZERO_SUFFIX = re.compile(r"bytes=-0+", re.ASCII | re.IGNORECASE)
# A first byte past any file: aiohttp answers it 416 with the file's real size.
_PAST_ANY_END = f"bytes={2**63}-"


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


def respell_zero_suffix(request: web.Request) -> web.Request:
    """``request`` itself, or, when its Range is a suffix of no bytes, a copy whose Range
    aiohttp's ``FileResponse`` refuses with 416 (a handler that serves no file ignores
    Range either way). Called only for a request that has a Range header."""
    spec = request.headers[hdrs.RANGE]
    if _ZERO_SUFFIX.fullmatch(spec) is None:
        return request
    headers = CIMultiDict(request.headers)
    headers[hdrs.RANGE] = _PAST_ANY_END
    return request.clone(headers=headers)
