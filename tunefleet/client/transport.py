"""The HTTP side of the client: one aiohttp session to the orchestrator's public API.

Only public endpoints (``Authorization: Bearer``), so it works against any orchestrator
the caller can reach. With several URLs (an active orchestrator and its standbys) a
request that one of them answers 503 (a standby) or that cannot connect to it (so
nothing was sent) goes to the URL the 503 names as active when it is listed, else to
the next; the transport stays with the one that answered. Every failure is a
``ClientError`` (tunefleet/client/errors.py). The command line and ``Client`` both
talk through it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from tunefleet import __version__
from tunefleet.client.connection import DEFAULT_URL, Connection
from tunefleet.client.errors import (
    ENV_URL,
    ApiError,
    ClientError,
    NotTheOrchestrator,
    Spelling,
    StreamFailed,
    TlsFailure,
    Unreachable,
    connection_error,
    status_error,
    tls_hint,
)
from tunefleet.errors import TunefleetError
from tunefleet.protocol.sse import SseEvent, SseParser
from tunefleet.protocol.tls import client_ssl_context

USER_AGENT = f"tunefleet-client/{__version__}"
_CONTENT_RANGE = re.compile(r"bytes (\d+)-\d+/(?:\d+|\*)")
_UNSATISFIED_RANGE = re.compile(r"bytes \*/(\d+)")
_REDIRECTS = (301, 302, 303, 307, 308)


class Transport:
    """One aiohttp session to the orchestrator, authenticated with the API token.

    ``spelling`` names the settings in messages the way the caller spells them
    (``--token`` on the command line, ``token=`` in Python).
    """

    def __init__(
        self,
        conn: Connection,
        spelling: Spelling,
        *,
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        user_agent: str = USER_AGENT,
    ) -> None:
        self._urls = conn.urls or (DEFAULT_URL,)
        self.conn = conn.at(self._urls[0])
        self.spelling = spelling
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._headers = {"User-Agent": user_agent, "Accept": "application/json"}
        if conn.token:
            self._headers["Authorization"] = f"Bearer {conn.token}"
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            tls: ssl.SSLContext | bool = True
            if any(url.startswith("https://") for url in self._urls):
                try:
                    tls = client_ssl_context(self.conn.ca_cert, self.conn.verify)
                except TunefleetError as error:
                    raise TlsFailure(f"{error}. {tls_hint(self.spelling)}") from error
            connector = aiohttp.TCPConnector(ssl=tls)
            self._session = aiohttp.ClientSession(headers=self._headers, connector=connector)
        return self._session

    @property
    def urls(self) -> tuple[str, ...]:
        return self._urls

    def url(self, path: str) -> str:
        return self.conn.base_url + path

    def _next(self, data: Any = None) -> None:
        """Move to the listed URL a standby's 503 names as active, else to the next."""
        named = data.get("active_url") if isinstance(data, dict) else None
        named = named.rstrip("/") if isinstance(named, str) else None
        current = self._urls.index(self.conn.base_url)
        if named in self._urls and named != self.conn.base_url:
            self.conn = self.conn.at(named)
        else:
            self.conn = self.conn.at(self._urls[(current + 1) % len(self._urls)])

    def _connection_error(self, error: BaseException) -> ClientError:
        return connection_error(self.conn.base_url, error, self.spelling)

    def _status_error(self, status: int, detail: str, headers: Any = None) -> ApiError:
        return status_error(
            self.conn.base_url, self.conn.token, status, detail, self.spelling, headers
        )

    # --- requests ---------------------------------------------------------------------

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return await self.request("GET", path, params=params)

    async def post(self, path: str, body: Mapping[str, Any] | None = None) -> Any:
        return await self.request("POST", path, body=body if body is not None else {})

    async def delete(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return await self.request("DELETE", path, params=params)

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """The decoded JSON answer; raises a ``ClientError`` on any failure."""
        timeout = aiohttp.ClientTimeout(
            total=self.request_timeout_s, sock_connect=self.connect_timeout_s
        )
        for tries_left in reversed(range(len(self._urls))):
            try:
                async with self._client().request(
                    method, self.url(path), json=body, params=query(params), timeout=timeout
                ) as response:
                    text = await response.text(errors="replace")
                    data = self._decode(response, text)
            except aiohttp.ClientConnectorError as error:  # nothing was sent: try the next
                if tries_left and not isinstance(error, aiohttp.ClientSSLError):
                    self._next()
                    continue
                raise self._connection_error(error) from error
            except (aiohttp.ClientError, TimeoutError) as error:
                raise self._connection_error(error) from error
            if response.status == 503 and tries_left:  # a standby: the request was not run
                self._next(data)
                continue
            if response.status >= 400:
                detail = data.get("detail") if isinstance(data, dict) else None
                raise self._status_error(
                    response.status, str(detail or text[:200]), response.headers
                )
            return data
        raise AssertionError("unreachable: the last try returns or raises")

    def _decode(self, response: aiohttp.ClientResponse, text: str) -> Any:
        try:
            return json.loads(text) if text else None
        except ValueError:
            raise NotTheOrchestrator(
                f"{self.conn.base_url} answered HTTP {response.status} with "
                f"{response.content_type}, not the orchestrator's JSON: is "
                f"{self.spelling.url} (or {ENV_URL}) the orchestrator's address?"
            ) from None

    # --- downloads ----------------------------------------------------------------------

    async def download(
        self,
        path: str,
        dest: Path,
        on_bytes: Callable[[int], None] | None = None,
        *,
        resume: bool = True,
    ) -> tuple[int, str]:
        """Stream ``path`` into ``dest`` through ``dest.part`` beside it, renamed when
        whole; returns (size, SHA-256 hex). With ``resume``, a ``.part`` left by a broken
        download is continued with an HTTP Range request; ``on_bytes`` first gets what it
        already holds. A 307 to a presigned URL (a bucket store) is followed without the
        API token, which the bucket would refuse. A connection lost midway keeps the
        ``.part`` for the next try; any other failure deletes it."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.connect_timeout_s, sock_read=300
        )
        partial = dest.with_name(dest.name + ".part")
        offset = partial.stat().st_size if resume and partial.is_file() else 0
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        keep_partial = False
        try:
            async with self._client().get(
                self.url(path), timeout=timeout, allow_redirects=False, headers=headers
            ) as response:
                location = response.headers.get("Location")
                if response.status not in _REDIRECTS or not location:
                    return await self._save(response, partial, dest, offset, on_bytes)
            async with (
                aiohttp.ClientSession() as bare,
                bare.get(location, timeout=timeout, headers=headers) as response,
            ):
                return await self._save(response, partial, dest, offset, on_bytes)
        except (aiohttp.ClientError, TimeoutError) as error:
            keep_partial = resume
            raise self._connection_error(error) from error
        finally:
            if not keep_partial:
                with contextlib.suppress(OSError):
                    partial.unlink()

    async def _save(
        self,
        response: aiohttp.ClientResponse,
        partial: Path,
        dest: Path,
        offset: int,
        on_bytes: Callable[[int], None] | None,
    ) -> tuple[int, str]:
        if response.status == 416 and offset:
            # The range starts at or past the end: the part is whole if it is the size.
            whole = _UNSATISFIED_RANGE.fullmatch(response.headers.get("Content-Range", ""))
            if whole is not None and int(whole.group(1)) == offset:
                return self._finish(partial, dest, offset, on_bytes)
        if response.status >= 400:
            text = await response.text(errors="replace")
            detail: Any = None
            with contextlib.suppress(ValueError, AttributeError):
                detail = json.loads(text).get("detail")
            raise self._status_error(response.status, str(detail or text[:200]))
        start = 0
        if response.status == 206:
            ranged = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            start = int(ranged.group(1)) if ranged else -1
            if start != offset:
                raise Unreachable(
                    f"{self.conn.base_url} answered a range from byte {start} for one asked "
                    f"from byte {offset}; download again"
                )
        digest = hashlib.sha256()
        if start:
            _hash_file(partial, digest)
            if on_bytes is not None:
                on_bytes(start)
        size = start
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "ab" if start else "wb") as file:  # noqa: ASYNC230 - local disk
            async for chunk in response.content.iter_chunked(1024 * 1024):
                file.write(chunk)
                digest.update(chunk)
                size += len(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
        os.replace(partial, dest)
        return size, digest.hexdigest()

    def _finish(
        self, partial: Path, dest: Path, size: int, on_bytes: Callable[[int], None] | None
    ) -> tuple[int, str]:
        digest = hashlib.sha256()
        _hash_file(partial, digest)
        if on_bytes is not None:
            on_bytes(size)
        os.replace(partial, dest)
        return size, digest.hexdigest()

    # --- event streams ------------------------------------------------------------------

    @asynccontextmanager
    async def stream(
        self, path: str, params: Mapping[str, Any] | None = None, read_timeout_s: float = 60.0
    ) -> AsyncIterator[AsyncIterator[SseEvent]]:
        """Server-Sent Events from ``path``. Opening it raises the same errors as
        ``request``; a stream that breaks or ends while read raises ``StreamFailed``."""
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.connect_timeout_s, sock_read=read_timeout_s
        )
        for tries_left in reversed(range(len(self._urls))):
            try:
                response = await self._client().get(
                    self.url(path), params=query(params), headers=headers, timeout=timeout
                )
            except aiohttp.ClientConnectorError as error:
                if tries_left and not isinstance(error, aiohttp.ClientSSLError):
                    self._next()
                    continue
                raise self._connection_error(error) from error
            except (aiohttp.ClientError, TimeoutError) as error:
                raise self._connection_error(error) from error
            if response.status != 503 or not tries_left:
                break
            text = await response.text(errors="replace")
            response.release()
            self._next(self._decode(response, text))
        try:
            if response.status >= 400:
                text = await response.text(errors="replace")
                data = self._decode(response, text)
                detail = data.get("detail") if isinstance(data, dict) else None
                raise self._status_error(
                    response.status, str(detail or text[:200]), response.headers
                )
            if response.content_type != "text/event-stream":
                raise StreamFailed(f"{path} answered {response.content_type}, not an event stream")
            events = _events(response, path)
            try:
                yield events
            finally:
                await events.aclose()
        finally:
            response.release()


def _hash_file(path: Path, digest: Any) -> None:
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1024 * 1024), b""):
            digest.update(block)


async def _events(response: aiohttp.ClientResponse, path: str) -> AsyncGenerator[SseEvent, None]:
    parser = SseParser()
    try:
        async for chunk in response.content.iter_any():
            for event in parser.feed(chunk):
                yield event
    except TimeoutError as error:
        raise StreamFailed(f"the event stream {path} went silent") from error
    except aiohttp.ClientError as error:
        raise StreamFailed(f"the event stream {path} broke: {error}") from error


def event_data(event: SseEvent) -> dict[str, Any]:
    """An event's JSON payload; ``{}`` for one that is not a JSON object."""
    try:
        data = json.loads(event.data) if event.data else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def query(params: Mapping[str, Any] | None) -> list[tuple[str, str]] | None:
    """Query pairs without unset values; a list value repeats its key."""
    if params is None:
        return None
    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if item is None:
                continue
            pairs.append((key, str(item).lower() if isinstance(item, bool) else str(item)))
    return pairs
