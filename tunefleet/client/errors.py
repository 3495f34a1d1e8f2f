"""Everything ``tunefleet.client`` raises: one hierarchy under ``ClientError``.

Each error's text is what a person reads: what went wrong and what to do about it. The
orchestrator's refusals are ``ApiError`` (with ``status`` and the API's own ``detail``),
one subclass per status a caller may want to catch; failures before any answer are
``Unreachable`` (waiting may help) or ``TlsFailure`` (it will not).

Messages name the connection settings the way the caller spells them: the command line
says ``--token``, a Python caller ``token=`` (``Spelling``).
"""

from __future__ import annotations

import contextlib
import errno
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from tunefleet.errors import TunefleetError
from tunefleet.tokens import API_TOKEN_PREFIX, WORKER_TOKEN_PREFIX

ENV_URL = "TUNEFLEET_URL"
ENV_TOKEN = "TUNEFLEET_TOKEN"
ENV_CA_CERT = "TUNEFLEET_CA_CERT"
ENV_SSL_NO_VERIFY = "TUNEFLEET_SSL_NO_VERIFY"

_PERMISSION = re.compile(r"Permission denied: (?:cannot grant )?([a-z]+\.[a-z]+)")


@dataclass(frozen=True, slots=True)
class Spelling:
    """How the caller names each connection setting, for messages that say what to change."""

    url: str
    token: str
    ca_cert: str
    no_verify: str


CLI_SPELLING = Spelling(
    url="--url", token="--token", ca_cert="--ca-cert", no_verify="--ssl-no-verify"
)
PYTHON_SPELLING = Spelling(url="url=", token="token=", ca_cert="ca_cert=", no_verify="verify=False")


class ClientError(TunefleetError):
    """Base of every error the client raises; ``str()`` says what to do."""


class SettingsError(ClientError, ValueError):
    """A connection setting that cannot work (a URL that is not http:// or https://)."""


class Unreachable(ClientError):
    """No answer (refused, unresolvable, timed out, cut off), or not ready yet (503):
    waiting may help, unlike a refused token."""


class TlsFailure(ClientError):
    """TLS failed: the certificate did not verify, the handshake failed, or the CA
    certificate file cannot be loaded. Waiting will not help."""


class NotTheOrchestrator(ClientError):
    """Something answered, but not with the orchestrator's JSON: the URL is wrong."""


class StreamFailed(ClientError):
    """An event stream could not be opened, broke, or ended early."""


class ChecksumMismatch(ClientError):
    """A downloaded artifact's SHA-256 is not the one it was stored with (the file was
    deleted)."""


class WaitTimeout(ClientError, TimeoutError):
    """``Client.wait`` ran out of time before the job ended; the job goes on."""

    def __init__(self, job_id: str, status: str, timeout_s: float) -> None:
        super().__init__(
            f"{job_id} is still {status} after {timeout_s:g} s; the job goes on: wait "
            f"again, or cancel it with Client.cancel({job_id!r})"
        )
        self.job_id = job_id
        self.job_status = status  # ``status`` is the HTTP status on every TunefleetError
        self.timeout_s = timeout_s


class JobFailed(ClientError):
    """``Client.wait(check=True)``: the job ended, but did not complete. ``job`` is its
    detail (``status``, ``error``, ``attempt_history``)."""

    def __init__(self, job: Any) -> None:
        error = job.get("error")
        super().__init__(
            f"{job.get('job_id')} {job.get('status')}" + (f": {error}" if error else "")
        )
        self.job = job
        self.job_id = str(job.get("job_id"))
        self.job_status = str(job.get("status"))


class ApiError(ClientError):
    """The orchestrator answered with an error status. ``status`` is the HTTP status,
    ``detail`` the API's one-line reason (docs/api.md, "Errors")."""

    def __init__(self, status: int, detail: str, message: str | None = None) -> None:
        super().__init__(message or f"{detail} (HTTP {status})")
        self.status = status
        self.detail = detail


class BadRequest(ApiError):
    """400: what was sent does not fit; ``detail`` names the field."""


class Unauthorized(ApiError):
    """401: no token, or one the orchestrator does not accept."""


class Forbidden(ApiError):
    """403: the token lacks a permission, or the job is another's."""


class NotFound(ApiError):
    """404: no such job, worker or artifact, or one the token may not see."""


class Conflict(ApiError):
    """409: the thing is in a state that does not allow this (e.g. the job has ended)."""


class TooManyRequests(ApiError):
    """429: too many failed sign-ins from this address; ``retry_after_s`` says when."""

    retry_after_s: float | None = None


class ServerError(ApiError):
    """500 and other 5xx (but 503 and 507): a bug; ``detail`` has the request id."""


class Unavailable(ApiError, Unreachable):
    """503: the orchestrator is starting or stopping, or is a standby."""


class InsufficientStorage(ApiError):
    """507: the orchestrator's disk is below its floor; new bulk data is refused."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    429: TooManyRequests,
    503: Unavailable,
    507: InsufficientStorage,
}


def tls_hint(spelling: Spelling) -> str:
    return (
        "If the orchestrator uses a self-signed certificate, pass it with "
        f"{spelling.ca_cert}{'' if spelling.ca_cert.endswith('=') else ' '}"
        f"<data-dir>/tls/cert.pem (or {ENV_CA_CERT}); {spelling.no_verify} turns "
        "verification off (development only)."
    )


def connection_error(base_url: str, error: BaseException, spelling: Spelling) -> ClientError:
    """An aiohttp or socket failure as a message that says what to check."""
    where = f"the orchestrator at {base_url}"
    check = f"Check {spelling.url} (or {ENV_URL}) and that `tunefleet server` is running there."
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        reason = getattr(error.certificate_error, "verify_message", None) or str(
            error.certificate_error
        )
        return TlsFailure(
            f"TLS certificate verification failed for {base_url}: {reason}. " + tls_hint(spelling)
        )
    if isinstance(error, aiohttp.ClientSSLError):
        return TlsFailure(
            f"TLS handshake with {base_url} failed: {error}. If the orchestrator "
            "serves plain HTTP, use an http:// URL. " + tls_hint(spelling)
        )
    if isinstance(error, aiohttp.ClientConnectorDNSError):
        host = urlsplit(base_url).hostname
        return Unreachable(f"Cannot connect to {where}: cannot resolve host {host}. {check}")
    if isinstance(error, aiohttp.ClientConnectorError):
        if error.os_error.errno == errno.ECONNREFUSED or "refused" in str(error).lower():
            return Unreachable(f"Cannot connect to {where}: connection refused. {check}")
        reason = error.os_error.strerror or str(error.os_error)
        return Unreachable(f"Cannot connect to {where}: {reason}. {check}")
    if isinstance(error, TimeoutError):
        return Unreachable(f"No answer from {where} in time. {check}")
    return Unreachable(f"Lost the connection to {where}: {error or type(error).__name__}")


def status_error(
    base_url: str,
    token: str | None,
    status: int,
    detail: str,
    spelling: Spelling,
    headers: Any = None,
) -> ApiError:
    """An HTTP error status as the error class for it, with what to do about it."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    message = _advice(base_url, token, status, detail, spelling)
    error = cls(status, detail, message)
    if isinstance(error, TooManyRequests) and headers is not None:
        with contextlib.suppress(ValueError):
            error.retry_after_s = float(headers.get("Retry-After", ""))
    return error


def _advice(
    base_url: str, token: str | None, status: int, detail: str, spelling: Spelling
) -> str | None:
    """The message for a status that has something to advise; None: ``detail (HTTP n)``."""
    if status == 401:
        if not token:
            return (
                f"No API token: pass {spelling.token} or set {ENV_TOKEN} (the orchestrator "
                "prints an admin token on its first start; `tunefleet tokens create` makes "
                "more)."
            )
        if token.startswith(WORKER_TOKEN_PREFIX):
            return (
                f"The orchestrator at {base_url} rejected the token (HTTP 401): it is a "
                f"worker token ({WORKER_TOKEN_PREFIX}...), which only `tunefleet worker` uses. "
                f"Pass an API token ({API_TOKEN_PREFIX}...) with {spelling.token} or "
                f"{ENV_TOKEN}: the admin token printed at the orchestrator's first start, or "
                "one from `tunefleet tokens create`."
            )
        if "disabled" in detail:  # the token is fine; its user is disabled: say so
            return None
        return (
            f"The orchestrator at {base_url} rejected the API token (HTTP 401): it is "
            f"unknown or revoked. Check {spelling.token} / {ENV_TOKEN} for typos; an "
            "administrator can make a new one with `tunefleet tokens create`."
        )
    if status == 403:
        match = _PERMISSION.search(detail)
        if match is None:  # not a permission the token lacks: a user's role, a team, a job
            return None
        return (
            f"{detail} (HTTP 403): this token lacks that permission. Use a token that has "
            "it; an administrator can make one with "
            f"`tunefleet tokens create NAME --permission {match.group(1)}`."
        )
    if status == 503 and ("standby" in detail or "stepped down" in detail):
        return (
            f"The orchestrator at {base_url} is not the active one (HTTP 503: {detail}). "
            f"Use the active one's URL, or give every orchestrator's in {spelling.url} (or "
            f"{ENV_URL}) separated by commas so that the client finds the active one."
        )
    if status == 503:
        return (
            f"The orchestrator at {base_url} is starting or stopping (HTTP 503: {detail}); "
            "try again shortly."
        )
    return None
