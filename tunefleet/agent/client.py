"""The HTTP client for the worker endpoints of the orchestrator (docs: PROTOCOL.md).

Every failure becomes one of the errors of agent/errors.py, whose message is what the
user reads, with what to do about it.
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
from pydantic import ValidationError

from tunefleet import __version__

# Re-exported: the agent and its tests import them from here.
from tunefleet.agent.errors import (  # noqa: F401
    API_TOKEN_GIVEN_MESSAGE,
    CONNECTION_REFUSED_HINT,
    INVALID_TOKEN_MESSAGE,
    NOT_AN_ORCHESTRATOR_STRIKES,
    AgentError,
    InvalidToken,
    NotAnOrchestrator,
    NotAnOrchestratorGiveUp,
    OrchestratorNotFound,
    OrchestratorUnreachable,
    RequestRejected,
    StreamLost,
    TlsVerificationFailed,
    WrongScheme,
    tls_hint,
)
from tunefleet.agent.probe import describe_body, speaks_tls
from tunefleet.protocol.endpoints import (
    DisconnectRequest,
    QueueCheckResponse,
    RegisterResponse,
    StandbyRefusal,
)
from tunefleet.protocol.fields import WorkerType
from tunefleet.protocol.sse import SseEvent, SseParser
from tunefleet.tokens import API_TOKEN_PREFIX

USER_AGENT = f"tunefleet-agent/{__version__}"


@dataclass(frozen=True, slots=True)
class Registration:
    worker_id: str
    sse_url: str
    resume_job: dict[str, Any] | None
    abandon_job: str | None
    # tunefleet's additions (None from an orchestrator that does not send them).
    name: str | None = None
    worker_type: WorkerType | None = None


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
        refusal = StandbyRefusal.model_validate(data) if isinstance(data, dict) else None
        named = refusal.active_url.rstrip("/") if refusal and refusal.active_url else None
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
        if not isinstance(data, dict):
            raise NotAnOrchestrator(self.base_url, 200, describe_body(data))
        try:
            return _registration(data)
        except ValidationError as error:  # no worker id: not an orchestrator's answer
            raise NotAnOrchestrator(self.base_url, 200, describe_body(data)) from error

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
        return isinstance(data, dict) and QueueCheckResponse.model_validate(data).has_jobs

    async def disconnect(self, worker_id: str, timeout_s: float | None = None) -> None:
        body = DisconnectRequest.model_construct(worker_id=worker_id).model_dump(exclude_unset=True)
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
                    data = await read_body(response)
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
                data = await read_body(response)
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


async def read_body(response: aiohttp.ClientResponse) -> Any:
    """The answer's JSON, or its text when it is not JSON (a proxy's page), or None."""
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
    answer = RegisterResponse.read(data)
    return Registration(
        worker_id=answer.worker_id,
        sse_url=answer.sse_url,
        resume_job=answer.resume_job.model_dump() if answer.resume_job else None,
        abandon_job=answer.abandon_job,
        name=answer.name,
        worker_type=answer.worker_type,
    )
