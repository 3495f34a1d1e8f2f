"""Logging for every tunefleet process: structlog in front, the standard library behind.

Everything, structlog events and plain ``logging`` records alike (aiohttp, asyncio,
transitions), goes through one handler whose last steps redact secrets and render
console or JSON lines, so no code path can print a token.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from collections.abc import Mapping
from typing import Any, Literal, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from tunefleet.log_console import PlainConsoleRenderer

LogFormat = Literal["console", "json"]

# wt_ worker tokens, tf_ API tokens and ut_ upload tokens: prefix + URL-safe base64. The
# look-behind keeps words such as "newt_..." from matching; six characters keep "tf_x" readable.
TOKEN_PATTERN = re.compile(r"(?<![A-Za-z0-9])(wt|tf|ut)_([A-Za-z0-9_\-]{6,})")
# Keys whose value is a secret whatever it looks like: token, worker_token,
# X-Worker-Token, password, client_secret, authorization. Not token_hash.
_SECRET_KEY = re.compile(r"(?:^|[_\-])(token|password|passwd|secret|authorization)$", re.I)
REDACTED = "[redacted]"
# Shorter token bodies show no tail at all: four of a few characters is too much.
_MIN_BODY_FOR_TAIL = 16
_MAX_DEPTH = 8
_PLAIN = (int, float, bool, type(None))
# Loggers that are too chatty at their own defaults.
_QUIET_LOGGERS = {"transitions": logging.WARNING, "peewee": logging.INFO}


def _mask(match: re.Match[str]) -> str:
    prefix, body = match.group(1), match.group(2)
    tail = body[-4:] if len(body) >= _MIN_BODY_FOR_TAIL else ""
    return f"{prefix}_…{tail}"


def _may_hold_token(text: str) -> bool:
    """False when ``text`` has none of the token prefixes: most text (ids, states, log
    messages), and three substring scans cost less than the regex that finds no match."""
    return "wt_" in text or "tf_" in text or "ut_" in text


def redact_text(text: str) -> str:
    """``text`` with every token replaced by its prefix and last four characters."""
    return TOKEN_PATTERN.sub(_mask, text) if _may_hold_token(text) else text


def contains_token(text: str) -> bool:
    return _may_hold_token(text) and TOKEN_PATTERN.search(text) is not None


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Whether a key names a secret. Cached: every log line asks it of the same few keys
    (event, timestamp, level, logger, job_id...)."""
    return _SECRET_KEY.search(key) is not None


def redact(value: object, _depth: int = 0) -> object:
    """A copy of ``value`` with tokens masked inside strings, containers and the
    reprs of other objects, and values under secret-named keys replaced."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, _PLAIN):
        return value
    if _depth >= _MAX_DEPTH:
        return REDACTED
    if isinstance(value, Mapping):
        return {k: _redact_item(k, v, _depth) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [redact(item, _depth + 1) for item in value]
    if isinstance(value, bytes):
        return redact(value.decode("utf-8", "replace"), _depth + 1)
    # An arbitrary object is rendered by its repr; only replace it when that leaks.
    shown = repr(value)
    return redact_text(shown) if contains_token(shown) else value


def _redact_item(key: object, value: object, depth: int) -> object:
    if isinstance(key, str) and is_secret_key(key) and value is not None:
        if isinstance(value, str) and TOKEN_PATTERN.fullmatch(value):
            return redact_text(value)
        return REDACTED
    return redact(value, depth + 1)


def redact_secrets(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: the last step before rendering."""
    # Assigning to existing keys only: iterating the live items is safe.
    for key, value in event_dict.items():
        # The usual field, text or a number under an ordinary key, costs a type check
        # and the three substring scans, not the general walk.
        if type(key) is str and not is_secret_key(key):
            kind = type(value)
            if kind is str:
                if _may_hold_token(value):
                    event_dict[key] = redact_text(value)
                continue
            if value is None or kind is int or kind is float or kind is bool:
                continue
        event_dict[key] = _redact_item(key, value, 0)
    return event_dict


class _LineFormatter(structlog.stdlib.ProcessorFormatter):
    """ProcessorFormatter's lines without its copy of every record.

    ProcessorFormatter copies each record (a second ``LogRecord``, about a quarter of a
    line's cost) so that it can strip the copy and pass it through ``logging.Formatter``,
    which with its ``%(message)s`` format returns the rendered text as it is. For a
    structlog event this renders the event dict directly, leaving the record untouched
    for any other handler; foreign records (aiohttp, asyncio) take ProcessorFormatter's
    own path. The lines are the same (a test compares them).
    """

    def format(self, record: logging.LogRecord) -> str:
        event = record.msg
        logger = getattr(record, "_logger", None)
        method = getattr(record, "_name", None)
        if type(event) is not dict or logger is None or method is None or self.logger:
            return super().format(record)
        event_dict: Any = event.copy()
        event_dict["_record"] = record
        event_dict["_from_structlog"] = True
        for processor in self.processors:
            event_dict = processor(logger, method, event_dict)
        return event_dict if isinstance(event_dict, str) else str(event_dict)


class _TunefleetHandler(logging.StreamHandler[TextIO]):
    """Marks the handler configure_logging installed, so a second call replaces it."""


def configure_logging(
    fmt: LogFormat | str = "console", verbose: bool = False, stream: TextIO | None = None
) -> None:
    """Route structlog and the standard library to ``stream`` (default: stderr) as
    console lines or JSON lines, ISO-8601 UTC timestamps, tokens redacted; DEBUG when
    ``verbose``, else INFO. Calling it again replaces the previous setup."""
    if fmt not in ("console", "json"):
        raise ValueError(f"log format must be 'console' or 'json', not {fmt!r}")
    target = stream if stream is not None else sys.stderr
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    renderer: Processor = (
        structlog.processors.JSONRenderer(ensure_ascii=False)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=True)
        if _is_tty(target)
        else PlainConsoleRenderer()
    )
    formatter = _LineFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_logger_name,
            structlog.stdlib.add_log_level,
            timestamper,
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            # Tracebacks become plain text here (never rich's, which prints local
            # variables) so the redaction below sees them too.
            structlog.processors.format_exc_info,
            redact_secrets,
            renderer,
        ],
    )
    handler = _TunefleetHandler(target)
    handler.setFormatter(formatter)

    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _TunefleetHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for name, level in _QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    logging.captureWarnings(True)
    # No format renders the calling file, line or function: skip the stack walk that
    # finds them, a fifth of a line's cost (CPython's own switch for this, see the
    # comment at logging._srcfile).
    logging._srcfile = None
    # Nor the thread or the process: each record would gather them (os.getpid() is a
    # system call, multiprocessing's current process a lookup), 2-3 us of a line's cost.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False

    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.filter_by_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.add_log_level,
            structlog.stdlib.PositionalArgumentsFormatter(),
            timestamper,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: a cached logger keeps the configuration of its first use, which
        # would defeat reconfiguring (tests, structlog.testing.capture_logs).
        cache_logger_on_first_use=False,
    )


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
