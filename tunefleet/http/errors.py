"""Every error leaves the orchestrator as ``{"detail": "<one line>"}`` with its HTTP status.

``error_middleware`` renders, in this order: ``ApiError`` (raised by the HTTP layer),
aiohttp's own HTTP exceptions (unknown route, wrong method, body too large), tunefleet's
domain errors (``TunefleetError`` subclasses carrying a ``status``), and anything else as a
500 whose detail names the request id but never the exception: the traceback goes to the
log. Every response carries ``X-Request-ID``.
"""

from __future__ import annotations

import contextvars
import random
import re
from collections.abc import Mapping

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler
from structlog.contextvars import bind_contextvars

from tunefleet.errors import TunefleetError
from tunefleet.logging import redact_text

log = structlog.get_logger(__name__)

REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID_KEY = web.RequestKey("tunefleet_request_id", str)
MAX_DETAIL_CHARS = 300
# A caller's (or proxy's) own id is kept for correlation only when it is short and plain,
# so it can go into logs and headers as it is.
_SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_WHITESPACE = re.compile(r"\s+")
# Request ids correlate log lines; nobody needs to guess them, so a generator of our own,
# seeded from os.urandom, does instead of uuid4 (a tenth of the cost, on every request).
_REQUEST_ID_BITS = random.Random()
# The ContextVar behind bind_contextvars(request_id=...), named by the Token that binding
# returns (made in a throwaway context, so nothing stays bound): setting and resetting it
# is that binding and reset_contextvars without their two calls, dict and key strings on
# every request (issue 14). merge_contextvars reads it as it reads any bound key.
_REQUEST_ID_VAR = contextvars.Context().run(bind_contextvars, request_id=...)["request_id"].var


class ApiError(TunefleetError):
    """An HTTP error with the one-line detail the client sees.

    ``detail`` says what is wrong and, where the client can fix it, what to send instead.
    """

    def __init__(self, status: int, detail: str, *, headers: Mapping[str, str] | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = one_line(detail)
        self.headers: dict[str, str] = dict(headers or {})

    def __repr__(self) -> str:
        return f"ApiError({self.status}, {self.detail!r})"


def one_line(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """Collapse whitespace (newlines included) and cut to ``limit`` characters."""
    flat = _WHITESPACE.sub(" ", text).strip()
    if len(flat) > limit:
        return flat[: limit - 1] + "…"
    return flat


def error_response(
    status: int, detail: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    """The JSON error body every failure uses. A token the client pasted where an id
    goes is masked like in the logs: error bodies end up in proxies' and scripts' logs."""
    response = web.json_response({"detail": one_line(redact_text(detail))}, status=status)
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def new_request_id() -> str:
    """16 hex digits (64 random bits)."""
    return f"{_REQUEST_ID_BITS.getrandbits(64):016x}"


def request_id(request: web.Request) -> str:
    """The id ``error_middleware`` gave this request ("-" outside the middleware)."""
    return request.get(REQUEST_ID_KEY, "-")


def internal_error_detail(rid: str) -> str:
    return f"internal error; see the orchestrator log (request id {rid})"


def _http_exception_detail(request: web.Request, error: web.HTTPException) -> str:
    default_text = f"{error.status}: {error.reason}"
    if error.text and error.text != default_text:
        return error.text
    if error.status == 404:
        return f"Not found: {request.method} {request.path}"
    if isinstance(error, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(error.allowed_methods))
        return f"Method {request.method} not allowed on {request.path}; use {allowed}"
    return error.reason


def _passed_headers(error: web.HTTPException) -> dict[str, str]:
    # Keep what the exception meant to say (Allow, WWW-Authenticate, Retry-After), not the
    # headers that describe its own text body.
    skip = {"content-type", "content-length"}
    return {k: v for k, v in error.headers.items() if k.lower() not in skip}


def start_request(request: web.Request) -> str:
    """Give the request its id (the caller's own when it is safe to keep) and return it."""
    rid = request.headers.get(REQUEST_ID_HEADER)
    if rid is not None:
        rid = rid.strip()
        if not _SAFE_REQUEST_ID.fullmatch(rid):
            rid = None
    if rid is None:
        rid = new_request_id()
    request[REQUEST_ID_KEY] = rid
    return rid


def failure_response(request: web.Request, error: Exception, rid: str) -> web.Response:
    """The JSON answer to a failed request; call it inside the ``except`` that caught
    ``error`` (a 500 logs its traceback). A raised redirect or success is not a failure:
    it gets the request id and is raised again, for aiohttp to send."""
    if isinstance(error, ApiError):
        log.debug("api_error", status=error.status, detail=error.detail, path=request.path)
        return error_response(error.status, error.detail, error.headers)
    if isinstance(error, web.HTTPException):
        if error.status < 400:
            error.headers[REQUEST_ID_HEADER] = rid
            raise error
        detail = _http_exception_detail(request, error)
        return error_response(error.status, detail, _passed_headers(error))
    if isinstance(error, TunefleetError):
        return _domain_error_response(request, error, rid)
    # CancelledError is a BaseException: it never gets here.
    log.exception("request_failed", method=request.method, path=request.path)
    return error_response(500, internal_error_detail(rid))


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Render every failure as JSON ``{"detail"}`` and tag every response with a request id.
    (The server's own app does this in ``front_door``, with its other per-request duties.)"""
    return await answer_or_render(request, handler)


async def answer_or_render(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The handler's response, or its failure rendered as JSON; the request's id on every
    log line of the request and on the response."""
    rid = start_request(request)
    # Every log line of the request carries its id: bind_contextvars(request_id=rid) and
    # its reset, straight on structlog's variable for that key (the same binding).
    token = _REQUEST_ID_VAR.set(rid)
    try:
        response = await handler(request)
    except Exception as error:
        response = failure_response(request, error, rid)
    finally:
        _REQUEST_ID_VAR.reset(token)
    if not response.prepared:
        response.headers[REQUEST_ID_HEADER] = rid
    return response


async def request_id_on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare`` hook: a response its handler writes itself (an SSE stream, a
    reply sent before the handler returns) is on the wire before ``error_middleware`` sees
    it, so the id goes on here, as the headers are sent."""
    put_request_id(request, response)


def put_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """What ``request_id_on_prepare`` does, for a hook doing more. The header is looked
    at first: every response the middleware saw already has it."""
    headers = response.headers
    if REQUEST_ID_HEADER not in headers:
        rid = request.get(REQUEST_ID_KEY)
        if rid is not None:
            headers[REQUEST_ID_HEADER] = rid


def _domain_error_response(request: web.Request, error: TunefleetError, rid: str) -> web.Response:
    status = getattr(error, "status", 500)
    if not isinstance(status, int) or not (400 <= status < 500 or status in (502, 503, 504, 507)):
        # A deliberate error without a client-facing status is still a bug to the client.
        log.exception(
            "request_failed",
            method=request.method,
            path=request.path,
            error_type=type(error).__name__,
            error=str(error),
        )
        return error_response(500, internal_error_detail(rid))
    log.debug("domain_error", status=status, error_type=type(error).__name__, path=request.path)
    return error_response(status, str(error) or type(error).__name__)
