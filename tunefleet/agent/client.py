"""The HTTP client for the worker endpoints of the orchestrator (docs: PROTOCOL.md).

Every failure becomes one of a few errors whose message is what the user reads, with
what to do about it; the agent decides from the error's type whether to retry
(``OrchestratorUnreachable``) or to stop (``InvalidToken``, ``TlsVerificationFailed``,
``OrchestratorNotFound``).
"""

from __future__ import annotations

import errno
import json
import socket
import ssl
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import aiohttp

from tunefleet import __version__
from tunefleet.agent.probe import describe_body, speaks_tls
from tunefleet.agent.sse import SseEvent, SseParser
from tunefleet.errors import TunefleetError
from tunefleet.http.tokens import API_TOKEN_PREFIX

USER_AGENT = f"tunefleet-agent/{__version__}"

CONNECTION_REFUSED_HINT = (
    "Check the orchestrator URL and port, that firewall rules allow inbound connections "
    "to that port, and that the orchestrator listens on all interfaces "
    "(tunefleet server --host 0.0.0.0)."
)
INVALID_TOKEN_MESSAGE = (
    "Invalid token: the orchestrator rejected the worker token (HTTP 401). The token may "
    "have been rotated or the worker deleted: ask an administrator for a new token "
    "(POST /api/admin/workers/<worker_id>/token), and check the token for stray whitespace."
)
API_TOKEN_GIVEN_MESSAGE = (
    "Invalid token: the orchestrator rejected the token (HTTP 401) because it is an API "
    "token (tf_...), which is for people and scripts. The worker agent needs a worker token "
    "(wt_...): an administrator creates one with `tunefleet workers create NAME` (or POST "
    "/api/admin/workers) and the response holds it."
)


def tls_hint(ca_cert: Path | None) -> str:
    if ca_cert is not None:
        return (
            f"The certificate given with --ca-cert, {ca_cert}, is not the one this "
            "orchestrator serves (or did not sign it): copy the orchestrator's certificate "
            "again (a `tunefleet server --ssl` prints its path at start, "
            "<data-dir>/tls/cert.pem) and pass that file."
        )
    return (
        "If the orchestrator uses a self-signed certificate, copy it to this machine and "
        "pass it with --ca-cert (a `tunefleet server --ssl` prints its path at start, "
        "<data-dir>/tls/cert.pem, and puts it in the worker command it shows), or add it to "
        "the system trust store; --ssl-no-verify turns verification off (development only)."
    )


class AgentError(TunefleetError):
    """Base of the errors the worker agent reports to its user."""


class InvalidToken(AgentError):
    """401: retrying cannot help; the agent exits. ``api_token``: the token given was an
    API token (its prefix says so), the commonest mix-up, so the message names it."""

    def __init__(self, *, api_token: bool = False) -> None:
        super().__init__(API_TOKEN_GIVEN_MESSAGE if api_token else INVALID_TOKEN_MESSAGE)


class TlsVerificationFailed(AgentError):
    """The orchestrator's certificate did not verify; retrying cannot help."""

    def __init__(self, url: str, reason: str, ca_cert: Path | None = None) -> None:
        super().__init__(f"SSL certificate verify failed for {url}: {reason}. {tls_hint(ca_cert)}")


class OrchestratorNotFound(AgentError):
    """The URL answers, but not as an orchestrator (404 on the register endpoint)."""

    def __init__(self, url: str, status: int) -> None:
        super().__init__(
            f"{url} answered HTTP {status}: that URL does not serve the worker API. Check "
            "--orchestrator-url (the orchestrator's base URL, e.g. https://host:8001)."
        )


class WrongScheme(AgentError):
    """An http:// URL whose port speaks TLS: retrying cannot help; the agent exits."""

    def __init__(self, url: str) -> None:
        https = "https://" + url.removeprefix("http://")
        super().__init__(
            f"{url} closed the connection without answering, and its port speaks HTTPS: "
            f"the orchestrator serves TLS (tunefleet server --ssl). Use {https} (with "
            "--ca-cert for a self-signed certificate)."
        )


class OrchestratorUnreachable(AgentError):
    """The orchestrator cannot be reached or answered 5xx: try again later. When there
    was an answer: its ``http_status``, whether it was a JSON object (``json``) and what
    it said (``detail``)."""

    def __init__(
        self,
        message: str,
        *,
        http_status: int | None = None,
        json: bool = True,
        detail: str = "",
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.json = json
        self.detail = detail


# A proxy may answer so for a moment while its orchestrator starts; three in a row, a
# few seconds apart with the backoff, is not a moment.
NOT_AN_ORCHESTRATOR_STRIKES = 3


class NotAnOrchestratorGiveUp(AgentError):
    """The last NotAnOrchestrator, after which the agent stops."""


class NotAnOrchestrator(OrchestratorUnreachable):
    """The URL answers, but not as an orchestrator (501, or a page instead of JSON).
    Retried a few times (a proxy may answer so while the orchestrator starts), then the
    agent stops (``NOT_AN_ORCHESTRATOR_STRIKES``)."""

    def __init__(self, url: str, status: int, body: str) -> None:
        super().__init__(
            f"{url} answered HTTP {status} with {body}, not the orchestrator's JSON: it is "
            "not a tunefleet (or SimpleTuner) orchestrator. Check --orchestrator-url: the "
            "orchestrator's base URL and port, e.g. https://host:8001, as `tunefleet server` "
            "prints it.",
            http_status=status,
            json=False,
            detail=body,
        )


class StreamLost(OrchestratorUnreachable):
    """The job stream ended, went silent, or was not an event stream."""


class RequestRejected(AgentError):
    """A 4xx other than 401: the request itself was refused; ``status`` says why."""

    def __init__(self, status: int, detail: str, what: str, *, json: bool = True) -> None:
        self.status = status
        self.detail = detail
        self.json = json
        super().__init__(f"{what} refused with HTTP {status}: {detail}")


@dataclass(frozen=True, slots=True)
class Registration:
    worker_id: str
    sse_url: str
    resume_job: dict[str, Any] | None
    abandon_job: str | None
    # tunefleet's additions (None from an orchestrator that does not send them).
    name: str | None = None
    worker_type: str | None = None


class WorkerClient:
    """One aiohttp session to the orchestrator, authenticated with the worker token.

    ``base_url`` may carry a path prefix (a reverse proxy's), which every endpoint keeps.
    Given several URLs (an active orchestrator and its standbys), the client talks to one
    at a time and moves on when it answers 503 or cannot be reached: to the URL a
    standby's 503 names as the active one when it is in the list (never elsewhere: the
    token only goes where the user sent it), else to the next one. The agent's retry then
    registers there.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        token: str,
        *,
        tls: ssl.SSLContext | bool = True,
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        ca_cert: Path | None = None,
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        self.base_urls = [url.rstrip("/") for url in urls]
        self._current = 0
        self.failovers = 0
        self._failed: set[str] = set()  # URLs that failed us since the last answer
        # Seconds a 503 asked us to wait (Retry-After: a standby, or one taking over).
        self.retry_after_s: float | None = None
        self.ca_cert = ca_cert  # named in a TLS error
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._headers = {"X-Worker-Token": token, "User-Agent": USER_AGENT}
        self._api_token_given = token.startswith(API_TOKEN_PREFIX)
        self._tls = tls
        self._session: aiohttp.ClientSession | None = None

    @property
    def base_url(self) -> str:
        return self.base_urls[self._current]

    def _fail_over(self, used: str, data: Any = None) -> None:
        """The orchestrator at `used` did not serve us: pick the one to try next."""
        if len(self.base_urls) < 2 or used != self.base_url:
            return  # one URL only, or another request moved on already
        self._failed.add(used)
        named = data.get("active_url") if isinstance(data, dict) else None
        named = named.rstrip("/") if isinstance(named, str) else None
        if named in self.base_urls and named != used:
            self._current = self.base_urls.index(named)
        else:
            self._current = (self._current + 1) % len(self.base_urls)
        self.failovers += 1

    @property
    def untried_url(self) -> bool:
        """The client moved to a URL that has not failed it yet in this outage: worth
        trying at once rather than after the usual back-off."""
        return bool(self._failed) and self.base_url not in self._failed

    async def __aenter__(self) -> WorkerClient:
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

    # --- endpoints ----------------------------------------------------------------------

    async def register(self, body: Mapping[str, Any]) -> Registration:
        try:
            data = await self._request("POST", "/api/workers/register", "registration", body)
        except RequestRejected as error:
            if error.status in (404, 405):
                raise OrchestratorNotFound(self.base_url, error.status) from error
            if not error.json:
                raise NotAnOrchestrator(self.base_url, error.status, error.detail) from error
            raise
        except OrchestratorUnreachable as error:
            # 502-504 are a proxy whose orchestrator is away: worth waiting for.
            status = error.http_status
            proxy_waiting = status in (502, 503, 504) or error.json
            if status is not None and (status == 501 or not proxy_waiting):
                raise NotAnOrchestrator(self.base_url, status, error.detail) from error
            raise
        if not isinstance(data, dict) or not isinstance(data.get("worker_id"), str):
            raise NotAnOrchestrator(self.base_url, 200, describe_body(data))
        return _registration(data)

    async def heartbeat(self, body: Mapping[str, Any], timeout_s: float | None = None) -> None:
        await self._request("POST", "/api/workers/heartbeat", "heartbeat", body, timeout_s)

    async def report_status(self, job_id: str, body: Mapping[str, Any]) -> None:
        path = f"/api/workers/job/{job_id}/status"
        await self._request("POST", path, f"status report for job {job_id}", body)

    async def send_logs(self, job_id: str, body: Mapping[str, Any]) -> None:
        path = f"/api/workers/job/{job_id}/logs"
        await self._request("POST", path, f"logs for job {job_id}", body)

    async def queue_has_jobs(self, worker_id: str) -> bool:
        path = f"/api/workers/queue?worker_id={quote(worker_id)}"
        data = await self._request("GET", path, "queue check", None)
        return isinstance(data, dict) and bool(data.get("has_jobs"))

    async def disconnect(self, worker_id: str, timeout_s: float | None = None) -> None:
        body = {"worker_id": worker_id}
        await self._request("POST", "/api/workers/disconnect", "disconnect", body, timeout_s)

    async def stream(
        self, sse_url: str, last_event_id: str | None, read_timeout_s: float
    ) -> AsyncGenerator[SseEvent, None]:
        """The job stream's events. Ends only by raising: a closed or silent stream is
        ``StreamLost``. Wrap it in ``contextlib.aclosing`` so it closes promptly."""
        used = self.base_url
        url = sse_url if sse_url.startswith(("http://", "https://")) else self._url(sse_url)
        headers = {**self._headers, "Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.connect_timeout_s, sock_read=read_timeout_s
        )
        try:
            async with self._client().get(url, headers=headers, timeout=timeout) as response:
                if response.status != 200:
                    data = await _read_body(response)
                    if response.status == 503:
                        self._fail_over(used, data)
                    self._raise_for_status(response.status, data, "job stream")
                if response.content_type != "text/event-stream":
                    raise StreamLost(f"{url} answered {response.content_type}, not an event stream")
                parser = SseParser()
                async for chunk in response.content.iter_any():
                    for event in parser.feed(chunk):
                        yield event
            raise StreamLost("the orchestrator closed the job stream")
        except TimeoutError as error:
            self._fail_over(used)
            raise StreamLost(
                f"no event or ping on the job stream for {read_timeout_s:g} s"
            ) from error
        except aiohttp.ClientError as error:
            self._fail_over(used)
            raise await self._connection_error(used, error) from error

    # --- plumbing -----------------------------------------------------------------------

    def _url(self, path: str) -> str:
        return self.base_url + path

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # Created lazily: a session belongs to the running event loop.
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._tls))
        return self._session

    async def _request(
        self,
        method: str,
        path: str,
        what: str,
        body: Mapping[str, Any] | None,
        timeout_s: float | None = None,
    ) -> Any:
        timeout = aiohttp.ClientTimeout(
            total=timeout_s or self.request_timeout_s, sock_connect=self.connect_timeout_s
        )
        used = self.base_url
        try:
            async with self._client().request(
                method, used + path, json=body, headers=self._headers, timeout=timeout
            ) as response:
                data = await _read_body(response)
        except TimeoutError as error:
            self._fail_over(used)
            raise OrchestratorUnreachable(
                f"{what} to {used} timed out after {timeout.total:g} s"
            ) from error
        except aiohttp.ClientError as error:
            self._fail_over(used)
            raise await self._connection_error(used, error) from error
        if response.status == 503:
            self.retry_after_s = _retry_after(response.headers.get("Retry-After"))
            self._fail_over(used, data)
        elif response.status < 500:
            self._failed.clear()
            self.retry_after_s = None
        self._raise_for_status(response.status, data, what)
        return data

    async def _connection_error(self, used: str, error: aiohttp.ClientError) -> AgentError:
        if (
            isinstance(error, aiohttp.ServerDisconnectedError)
            and used.startswith("http://")
            and await speaks_tls(used)
        ):
            return WrongScheme(used)
        return connection_error(used, error, self.ca_cert)

    def _raise_for_status(self, status: int, data: Any, what: str) -> None:
        if status == 401:
            raise InvalidToken(api_token=self._api_token_given)
        _raise_for_status(status, data, what)


def connection_error(
    url: str, error: aiohttp.ClientError, ca_cert: Path | None = None
) -> AgentError:
    """Translate aiohttp's exception into the message the user needs."""
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        return TlsVerificationFailed(url, str(error.certificate_error), ca_cert)
    if isinstance(error, aiohttp.ClientSSLError):
        return OrchestratorUnreachable(
            f"TLS handshake with {url} failed: {error}. Is the orchestrator serving HTTPS "
            "(started with --ssl)? Use an http:// URL for one that is not."
        )
    if isinstance(error, aiohttp.ClientConnectorError):
        cause = error.os_error
        if isinstance(cause, socket.gaierror):
            return OrchestratorUnreachable(
                f"Cannot resolve the orchestrator's host name in {url}: {cause}. Check the URL."
            )
        if isinstance(cause, ConnectionRefusedError) or cause.errno == errno.ECONNREFUSED:
            return OrchestratorUnreachable(
                f"Connection refused by {url}: nothing is listening there. "
                + CONNECTION_REFUSED_HINT
            )
        return OrchestratorUnreachable(
            f"Cannot connect to {url}: {cause}. " + CONNECTION_REFUSED_HINT
        )
    return OrchestratorUnreachable(f"Connection to {url} lost: {error!r}")


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the HTTP-date form is not used by tunefleet), bounded."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return None if seconds is None or seconds < 0 else min(seconds, 60.0)


async def _read_body(response: aiohttp.ClientResponse) -> Any:
    text = await response.text(errors="replace")
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


def _raise_for_status(status: int, data: Any, what: str) -> None:
    if status < 400:
        return
    if status == 401:
        raise InvalidToken()
    detail = describe_body(data)  # never a raw HTML page
    json = isinstance(data, dict)
    if status >= 500:
        raise OrchestratorUnreachable(
            f"{what} failed: the orchestrator answered {status}: {detail}",
            http_status=status,
            json=json,
            detail=detail,
        )
    raise RequestRejected(status, detail, what, json=json)


def _registration(data: dict[str, Any]) -> Registration:
    worker_id = data["worker_id"]
    sse_url = data.get("sse_url")
    resume = data.get("resume_job")
    abandon = data.get("abandon_job")
    return Registration(
        worker_id=worker_id,
        sse_url=sse_url
        if isinstance(sse_url, str) and sse_url
        else f"/api/workers/stream?worker_id={worker_id}",
        resume_job=resume if isinstance(resume, dict) else None,
        abandon_job=abandon if isinstance(abandon, str) and abandon else None,
        name=_text(data.get("name")),
        worker_type=_text(data.get("worker_type")),
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
