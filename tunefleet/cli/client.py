"""The command line's HTTP client for the orchestrator's public API.

Only public endpoints (``Authorization: Bearer``), so it works against any orchestrator
the user can reach. Every failure becomes a ``CliError`` whose message is what the
user reads, with what to do about it, and whose ``exit_code`` the command exits with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import re
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from tunefleet import __version__
from tunefleet.errors import TunefleetError
from tunefleet.protocol.sse import SseEvent, SseParser
from tunefleet.protocol.tls import client_ssl_context
from tunefleet.tokens import API_TOKEN_PREFIX, WORKER_TOKEN_PREFIX

USER_AGENT = f"tunefleet-cli/{__version__}"
DEFAULT_URL = "http://127.0.0.1:8001"
ENV_URL = "TUNEFLEET_URL"
ENV_TOKEN = "TUNEFLEET_TOKEN"
ENV_CA_CERT = "TUNEFLEET_CA_CERT"
ENV_SSL_NO_VERIFY = "TUNEFLEET_SSL_NO_VERIFY"

_PERMISSION = re.compile(r"Permission denied: (?:cannot grant )?([a-z]+\.[a-z]+)")


class ExitCode(IntEnum):
    """What every ``tunefleet`` client command exits with (docs/cli.md)."""

    OK = 0
    FAILED = 1  # the job failed, or the orchestrator refused the request
    USAGE = 2  # click's own code for usage errors
    CANCELLED = 3
    CONNECTION = 4  # unreachable, TLS, 401, 403, 503
    INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, what a shell reports


class CliError(TunefleetError):
    """A failure the user reads; the command exits with ``exit_code``."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(self, message: str, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConnectionProblem(CliError):
    """The orchestrator cannot be reached or will not let this token in."""

    exit_code = ExitCode.CONNECTION


class Unreachable(ConnectionProblem):
    """No answer, or not yet ready (503): waiting may help, unlike a refused token."""


class ApiRefused(CliError):
    """The orchestrator answered, and refused: 400, 404, 409, 500 (``detail`` says why)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{detail} (HTTP {status})")
        self.status = status
        self.detail = detail


class StreamFailed(CliError):
    """An event stream could not be opened or ended early; followers fall back to polling."""

    exit_code = ExitCode.CONNECTION


@dataclass(frozen=True, slots=True)
class Connection:
    """Where the orchestrator is and how to talk to it (the shared command options)."""

    url: str = DEFAULT_URL
    token: str | None = None
    ca_cert: Path | None = None
    verify: bool = True

    @property
    def base_url(self) -> str:
        return self.urls[0]

    @property
    def urls(self) -> tuple[str, ...]:
        """Several orchestrators (one active, the others standing by) are comma-separated."""
        return tuple(part.strip().rstrip("/") for part in self.url.split(",") if part.strip())

    def at(self, url: str) -> Connection:
        """The same connection to one of its URLs (what messages name)."""
        return dataclasses.replace(self, url=url)


def _tls_hint() -> str:
    return (
        "If the orchestrator uses a self-signed certificate, pass it with --ca-cert "
        f"<data-dir>/tls/cert.pem (or {ENV_CA_CERT}); --ssl-no-verify turns verification "
        "off (development only)."
    )


def connection_error(conn: Connection, error: BaseException) -> ConnectionProblem:
    """An aiohttp or socket failure as a message that says what to check."""
    where = f"the orchestrator at {conn.base_url}"
    check = f"Check --url (or {ENV_URL}) and that `tunefleet server` is running there."
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        reason = getattr(error.certificate_error, "verify_message", None) or str(
            error.certificate_error
        )
        return ConnectionProblem(
            f"TLS certificate verification failed for {conn.base_url}: {reason}. {_tls_hint()}"
        )
    if isinstance(error, aiohttp.ClientSSLError):
        return ConnectionProblem(
            f"TLS handshake with {conn.base_url} failed: {error}. If the orchestrator "
            "serves plain HTTP, use an http:// URL. " + _tls_hint()
        )
    if isinstance(error, aiohttp.ClientConnectorDNSError):
        host = urlsplit(conn.base_url).hostname
        return Unreachable(f"Cannot connect to {where}: cannot resolve host {host}. {check}")
    if isinstance(error, aiohttp.ClientConnectorError):
        if error.os_error.errno == errno.ECONNREFUSED or "refused" in str(error).lower():
            return Unreachable(f"Cannot connect to {where}: connection refused. {check}")
        reason = error.os_error.strerror or str(error.os_error)
        return Unreachable(f"Cannot connect to {where}: {reason}. {check}")
    if isinstance(error, TimeoutError):
        return Unreachable(f"No answer from {where} in time. {check}")
    return Unreachable(f"Lost the connection to {where}: {error or type(error).__name__}")


def status_error(conn: Connection, status: int, detail: str) -> CliError:
    """An HTTP error status as what to do about it."""
    if status == 401:
        if not conn.token:
            return ConnectionProblem(
                f"No API token: pass --token or set {ENV_TOKEN} (the orchestrator prints an "
                "admin token on its first start; `tunefleet tokens create` makes more)."
            )
        if conn.token.startswith(WORKER_TOKEN_PREFIX):
            return ConnectionProblem(
                f"The orchestrator at {conn.base_url} rejected the token (HTTP 401): it is a "
                f"worker token ({WORKER_TOKEN_PREFIX}...), which only `tunefleet worker` uses. "
                f"Pass an API token ({API_TOKEN_PREFIX}...) with --token or {ENV_TOKEN}: the "
                "admin token printed at the orchestrator's first start, or one from "
                "`tunefleet tokens create`."
            )
        if "disabled" in detail:  # the token is fine; its user is disabled: say so
            return ConnectionProblem(f"{detail} (HTTP 401)")
        return ConnectionProblem(
            f"The orchestrator at {conn.base_url} rejected the API token (HTTP 401): it is "
            f"unknown or revoked. Check --token / {ENV_TOKEN} for typos; an administrator can "
            "make a new one with `tunefleet tokens create`."
        )
    if status == 403:
        match = _PERMISSION.search(detail)
        if match is None:  # not a permission the token lacks: a user's role, a team, a job
            return ConnectionProblem(f"{detail} (HTTP 403)")
        permission = match.group(1)
        return ConnectionProblem(
            f"{detail} (HTTP 403): this token lacks that permission. Use a token that has it; "
            f"an administrator can make one with "
            f"`tunefleet tokens create NAME --permission {permission}`."
        )
    if status == 503 and ("standby" in detail or "stepped down" in detail):
        return Unreachable(
            f"The orchestrator at {conn.base_url} is not the active one (HTTP 503: {detail}). "
            f"Use the active one's URL, or give every orchestrator's in --url (or {ENV_URL}) "
            "separated by commas so that the command finds the active one."
        )
    if status == 503:
        return Unreachable(
            f"The orchestrator at {conn.base_url} is starting or stopping (HTTP 503: {detail}); "
            "try again shortly."
        )
    return ApiRefused(status, detail)


class ApiClient:
    """One aiohttp session to the orchestrator, authenticated with the API token.

    With several URLs, a request that one of them answers 503 (a standby) or that cannot
    connect to it (so nothing was sent) goes to the URL the 503 names as active when it
    is listed, else to the next; the client stays with the one that answered.
    """

    def __init__(
        self, conn: Connection, *, request_timeout_s: float = 30.0, connect_timeout_s: float = 10.0
    ) -> None:
        self._all = conn
        self._urls = conn.urls or (DEFAULT_URL,)
        self.conn = conn.at(self._urls[0])
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if conn.token:
            self._headers["Authorization"] = f"Bearer {conn.token}"
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ApiClient:
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
            if self.conn.base_url.startswith("https://"):
                try:
                    tls = client_ssl_context(self.conn.ca_cert, self.conn.verify)
                except TunefleetError as error:
                    raise ConnectionProblem(f"{error}. {_tls_hint()}") from error
            connector = aiohttp.TCPConnector(ssl=tls)
            self._session = aiohttp.ClientSession(headers=self._headers, connector=connector)
        return self._session

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
        """The decoded JSON answer; raises ``CliError`` on any failure."""
        timeout = aiohttp.ClientTimeout(
            total=self.request_timeout_s, sock_connect=self.connect_timeout_s
        )
        for tries_left in reversed(range(len(self._urls))):
            try:
                async with self._client().request(
                    method, self.url(path), json=body, params=_query(params), timeout=timeout
                ) as response:
                    text = await response.text(errors="replace")
                    data = self._decode(response, text)
            except aiohttp.ClientConnectorError as error:  # nothing was sent: try the next
                if tries_left and not isinstance(error, aiohttp.ClientSSLError):
                    self._next()
                    continue
                raise connection_error(self.conn, error) from error
            except aiohttp.ClientError as error:
                raise connection_error(self.conn, error) from error
            except TimeoutError as error:
                raise connection_error(self.conn, error) from error
            if response.status == 503 and tries_left:  # a standby: the request was not run
                self._next(data)
                continue
            if response.status >= 400:
                detail = data.get("detail") if isinstance(data, dict) else None
                raise status_error(self.conn, response.status, str(detail or text[:200]))
            return data
        raise AssertionError("unreachable: the last try returns or raises")

    def _decode(self, response: aiohttp.ClientResponse, text: str) -> Any:
        try:
            return json.loads(text) if text else None
        except ValueError:
            raise ConnectionProblem(
                f"{self.conn.base_url} answered HTTP {response.status} with "
                f"{response.content_type}, not the orchestrator's JSON: is --url "
                f"(or {ENV_URL}) the orchestrator's address?"
            ) from None

    async def download(
        self, path: str, dest: Path, on_bytes: Callable[[int], None] | None = None
    ) -> tuple[int, str]:
        """Stream ``path`` into ``dest`` (through a temporary file beside it, renamed when
        whole); returns (size, SHA-256 hex). A 307 to a presigned URL (a bucket store) is
        followed without the API token, which the bucket would refuse."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.connect_timeout_s, sock_read=300
        )
        partial = dest.with_name(dest.name + ".part")
        try:
            async with self._client().get(
                self.url(path), timeout=timeout, allow_redirects=False
            ) as response:
                location = response.headers.get("Location")
                if response.status not in (301, 302, 303, 307, 308) or not location:
                    return await self._save(response, partial, dest, on_bytes)
            async with (
                aiohttp.ClientSession() as bare,
                bare.get(location, timeout=timeout) as response,
            ):
                return await self._save(response, partial, dest, on_bytes)
        except (aiohttp.ClientError, TimeoutError) as error:
            raise connection_error(self.conn, error) from error
        finally:
            with contextlib.suppress(OSError):
                partial.unlink()

    async def _save(
        self,
        response: aiohttp.ClientResponse,
        partial: Path,
        dest: Path,
        on_bytes: Callable[[int], None] | None,
    ) -> tuple[int, str]:
        if response.status >= 400:
            text = await response.text(errors="replace")
            detail: Any = None
            with contextlib.suppress(ValueError, AttributeError):
                detail = json.loads(text).get("detail")
            raise status_error(self.conn, response.status, str(detail or text[:200]))
        digest = hashlib.sha256()
        size = 0
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "wb") as file:  # noqa: ASYNC230 - local disk, chunk by chunk
            async for chunk in response.content.iter_chunked(1024 * 1024):
                file.write(chunk)
                digest.update(chunk)
                size += len(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
        os.replace(partial, dest)
        return size, digest.hexdigest()

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
                    self.url(path), params=_query(params), headers=headers, timeout=timeout
                )
            except aiohttp.ClientConnectorError as error:
                if tries_left and not isinstance(error, aiohttp.ClientSSLError):
                    self._next()
                    continue
                raise connection_error(self.conn, error) from error
            except (aiohttp.ClientError, TimeoutError) as error:
                raise connection_error(self.conn, error) from error
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
                raise status_error(self.conn, response.status, str(detail or text[:200]))
            if response.content_type != "text/event-stream":
                raise StreamFailed(f"{path} answered {response.content_type}, not an event stream")
            events = _events(response, path)
            try:
                yield events
            finally:
                await events.aclose()
        finally:
            response.release()


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


def _query(params: Mapping[str, Any] | None) -> list[tuple[str, str]] | None:
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
