"""configure_logging: formats, levels, stdlib routing, idempotence, and no token ever
reaching the output."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from logging_state import restore_logging  # noqa: F401  (autouse: logging put back)

from tunefleet.logging import (
    REDACTED,
    TOKEN_PATTERN,
    _mask,
    configure_logging,
    contains_token,
    is_secret_key,
    redact,
    redact_text,
)

WORKER_TOKEN = "wt_Q1w2E3r4T5y6U7i8O9p0AaSsDdFfGgHhJjKkLlZz-_x"
API_TOKEN = "tf_abcdefghijklmnopqrstuvwxyz0123456789ABCD"


def json_lines(buffer: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


def assert_no_token(text: str) -> None:
    for secret in (WORKER_TOKEN, API_TOKEN):
        assert secret not in text
        assert secret[3:20] not in text  # not even a slice of the body


def test_json_lines_have_iso_utc_timestamp_level_and_logger() -> None:
    out = io.StringIO()
    configure_logging("json", verbose=False, stream=out)
    structlog.get_logger("tunefleet.test").info("worker registered", worker_id="w_1")
    (line,) = json_lines(out)
    assert line["event"] == "worker registered"
    assert line["worker_id"] == "w_1"
    assert line["level"] == "info"
    assert line["logger"] == "tunefleet.test"
    assert isinstance(line["timestamp"], str)
    assert line["timestamp"].endswith("Z")
    assert "T" in line["timestamp"]


def test_console_format_is_one_readable_line() -> None:
    out = io.StringIO()
    configure_logging("console", verbose=False, stream=out)
    structlog.get_logger("tunefleet.test").warning("slow disk", fsync_ms=812)
    text = out.getvalue()
    assert "slow disk" in text
    assert "fsync_ms=812" in text
    assert "warning" in text
    assert "\x1b[" not in text  # a StringIO is not a terminal: no colour codes


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_line_does_not_look_for_its_callers_frame(
    fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No format names the calling file, line or function, so the stack walk (a fifth
    of a line's cost) is skipped; the line is the same."""
    calls: list[str] = []

    def find_caller(self: logging.Logger, *args: object, **kwargs: object) -> object:
        calls.append(self.name)
        return ("(unknown file)", 0, "(unknown function)", None)

    monkeypatch.setattr(logging.Logger, "findCaller", find_caller)
    for cls in logging.Logger.__subclasses__():
        monkeypatch.setattr(cls, "findCaller", find_caller)
    out = io.StringIO()
    configure_logging(fmt, verbose=False, stream=out)
    structlog.get_logger("tunefleet.test").info("job ended", job_id="j_1", state="completed")
    logging.getLogger("aiohttp.access").info("GET /api/workers 200")
    assert calls == []
    assert "job ended" in out.getvalue()
    assert "j_1" in out.getvalue()
    assert "GET /api/workers 200" in out.getvalue()


def test_verbose_turns_on_debug() -> None:
    out = io.StringIO()
    configure_logging("json", verbose=False, stream=out)
    structlog.get_logger("t").debug("hidden")
    logging.getLogger("t").debug("hidden too")
    assert out.getvalue() == ""
    configure_logging("json", verbose=True, stream=out)
    structlog.get_logger("t").debug("shown")
    logging.getLogger("t").debug("shown too")
    assert [line["event"] for line in json_lines(out)] == ["shown", "shown too"]


def test_stdlib_records_are_routed_through_structlog() -> None:
    out = io.StringIO()
    configure_logging("json", verbose=False, stream=out)
    logging.getLogger("aiohttp.access").info("%s %s %d", "GET", "/api/queue", 200)
    (line,) = json_lines(out)
    assert line == {
        "event": "GET /api/queue 200",
        "logger": "aiohttp.access",
        "level": "info",
        "timestamp": line["timestamp"],
    }


def test_transitions_logger_only_warns() -> None:
    out = io.StringIO()
    configure_logging("json", verbose=True, stream=out)
    logging.getLogger("transitions.core").info("Entered state busy")
    logging.getLogger("transitions.core").warning("odd")
    assert [line["event"] for line in json_lines(out)] == ["odd"]


def test_calling_twice_replaces_instead_of_duplicating() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("json", verbose=False, stream=first)
    configure_logging("json", verbose=False, stream=second)
    configure_logging("json", verbose=False, stream=second)
    structlog.get_logger("t").info("once")
    assert first.getvalue() == ""
    assert [line["event"] for line in json_lines(second)] == ["once"]


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="console' or 'json"):
        configure_logging("xml")


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_token_never_reaches_the_output(fmt: str) -> None:
    out = io.StringIO()
    configure_logging(fmt, verbose=True, stream=out)
    log = structlog.get_logger("tunefleet.http")
    log.info("registered", token=WORKER_TOKEN, worker_token=WORKER_TOKEN, password="hunter2")
    log.info(f"header was Bearer {API_TOKEN}")  # an f-string event is still redacted
    log.info("nested", labels={"k": [WORKER_TOKEN, ("x", API_TOKEN)]}, raw=WORKER_TOKEN.encode())
    log.info("object", thing=ValueError(WORKER_TOKEN))
    logging.getLogger("aiohttp.server").warning("bad request %s", WORKER_TOKEN)
    try:
        raise RuntimeError(f"could not use {API_TOKEN}")
    except RuntimeError:
        log.exception("failed")
        logging.getLogger("asyncio").exception("task failed")
    text = out.getvalue()
    assert_no_token(text)
    assert "hunter2" not in text
    assert f"wt_…{WORKER_TOKEN[-4:]}" in text
    assert f"tf_…{API_TOKEN[-4:]}" in text
    assert text.count("Traceback") == 2


# --- the redaction helpers --------------------------------------------------------


def test_redact_text_keeps_prefix_and_last_four() -> None:
    assert redact_text(f"use {WORKER_TOKEN} now") == f"use wt_…{WORKER_TOKEN[-4:]} now"
    upload = "ut_" + WORKER_TOKEN[3:]  # an upload token, as job_submit carries it
    assert redact_text(f'"upload_token": "{upload}"') == f'"upload_token": "ut_…{upload[-4:]}"'
    assert redact_text(f"token={API_TOKEN}&x=1") == f"token=tf_…{API_TOKEN[-4:]}&x=1"
    assert redact_text("a short one wt_abc123xyz") == "a short one wt_…"


@pytest.mark.parametrize(
    "text", ["newt_abcdefghijkl", "tf_x", "wt_", "w_abc123", "j_12", "software_testing"]
)
def test_things_that_are_not_tokens_are_left_alone(text: str) -> None:
    assert redact_text(text) == text
    assert not contains_token(text)


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("token", True),
        ("worker_token", True),
        ("X-Worker-Token", True),
        ("Authorization", True),
        ("password", True),
        ("client_secret", True),
        ("token_hash", False),
        ("tokens_issued", False),
        ("worker_id", False),
    ],
)
def test_secret_keys(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_redact_values_under_secret_keys_and_leaves_others() -> None:
    data = {"password": "hunter2", "token": None, "count": 3, "ok": True, "name": "gpu-1"}
    assert redact(data) == {
        "password": REDACTED,
        "token": None,
        "count": 3,
        "ok": True,
        "name": "gpu-1",
    }


def test_redact_gives_up_on_absurd_depth() -> None:
    deep: list[object] = [WORKER_TOKEN]
    for _ in range(20):
        deep = [deep]
    assert_no_token(json.dumps(redact(deep), default=str))


# --- the fast path: text without a token prefix skips the regex -------------------------

_PIECES = st.sampled_from(
    ["wt_", "tf_", "ut_", "xwt_", "WT_", "_", "-", " ", "j_0123", "Q1w2E3r4T5y6", "é", "\n"]
)


@given(st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=12).map("".join))
@settings(max_examples=300, deadline=None)
def test_redact_text_answers_as_the_token_pattern_alone_would(text: str) -> None:
    assert redact_text(text) == TOKEN_PATTERN.sub(_mask, text)
    assert contains_token(text) == (TOKEN_PATTERN.search(text) is not None)


def test_text_without_a_token_prefix_is_returned_as_it_is() -> None:
    text = "job j_0123456789abcdef ended on w_abc (state completed)"
    assert redact_text(text) is text
    assert not contains_token(text)
    assert redact_text(f"{text} {WORKER_TOKEN}") == f"{text} wt_…{WORKER_TOKEN[-4:]}"


def test_secret_key_verdicts_are_the_same_when_asked_again() -> None:
    for _ in range(2):
        assert is_secret_key("worker_token") and is_secret_key("X-Worker-Token")
        assert not is_secret_key("token_hash") and not is_secret_key("job_id")
