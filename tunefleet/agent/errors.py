"""The errors of the worker agent's client, each with the message its user reads and
what to do about it. Their type tells the agent whether to retry
(``OrchestratorUnreachable``) or to stop (``InvalidToken``, ``TlsVerificationFailed``,
``OrchestratorNotFound``, ``WrongScheme``, ``NotAnOrchestratorGiveUp``)."""

from __future__ import annotations

from pathlib import Path

from tunefleet.errors import TunefleetError

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
