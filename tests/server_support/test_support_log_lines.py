"""The server's log lines, as configure_logging writes them: the same text as structlog's
ProcessorFormatter renders for every kind of line."""

from __future__ import annotations

import io
import logging
import re
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from logging_state import restore_logging  # noqa: F401  (autouse: logging put back)

from tunefleet.logging import _LineFormatter, _TunefleetHandler, configure_logging

WORKER_TOKEN = "wt_Q1w2E3r4T5y6U7i8O9p0AaSsDdFfGgHhJjKkLlZz-_x"
API_TOKEN = "tf_abcdefghijklmnopqrstuvwxyz0123456789ABCD"
# The timestamp ProcessorFormatter adds to a foreign record when it formats it.
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


class Records(logging.Handler):
    """Another handler on the root logger, as pytest's caplog is: keeps each record, and
    its text as ``reference`` formats it at the same moment (``exc_info=True`` is read
    when the line is formatted)."""

    def __init__(self, reference: logging.Formatter | None = None) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.reference = reference
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if self.reference is not None:
            self.lines.append(self.reference.format(record) + "\n")


def installed() -> _TunefleetHandler:
    (handler,) = [h for h in logging.getLogger().handlers if isinstance(h, _TunefleetHandler)]
    return handler


def reference_formatter(handler: _TunefleetHandler) -> structlog.stdlib.ProcessorFormatter:
    """structlog's own ProcessorFormatter with the same steps: what the lines were."""
    ours = handler.formatter
    assert isinstance(ours, _LineFormatter)
    return structlog.stdlib.ProcessorFormatter(
        processors=ours.processors, foreign_pre_chain=ours.foreign_pre_chain
    )


def log_every_kind_of_line() -> None:
    log = structlog.get_logger("tunefleet.actors.job_actor")
    log.info("job ended", job_id="j_0123456789abcdef", state="completed", reason=None)
    log.warning("slow disk", fsync_ms=812, path="/var/lib/tunefleet db", ratio=0.25)
    log.debug("quoted", text="a 'b' = \"c\"\tnew\nline", empty="", many=[1, "two", None])
    log.info("registered", token=WORKER_TOKEN, worker_token=WORKER_TOKEN, password="hunter2")
    log.info(f"header was Bearer {API_TOKEN}", labels={"k": [WORKER_TOKEN, ("x", API_TOKEN)]})
    log.info("bytes and objects", raw=WORKER_TOKEN.encode(), thing=ValueError(WORKER_TOKEN))
    log.info("positional %s and %d", "args", 3)
    log.info("non-ascii é ü 漢字", who="zoë")
    log.info("with stack", stack_info=True)
    structlog.get_logger().info("no logger name")
    logging.getLogger("aiohttp.access").info("%s %s %d", "GET", "/api/queue", 200)
    logging.getLogger("aiohttp.server").warning("bad request %s", WORKER_TOKEN)
    try:
        raise RuntimeError(f"could not use {API_TOKEN}")
    except RuntimeError:
        log.exception("failed", job_id="j_1")
        log.error("failed again", exc_info=True)
        logging.getLogger("asyncio").exception("task failed")


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_every_kind_of_line_is_what_processor_formatter_writes(fmt: str) -> None:
    out = io.StringIO()
    configure_logging(fmt, verbose=True, stream=out)
    records = Records(reference_formatter(installed()))
    logging.getLogger().addHandler(records)
    log_every_kind_of_line()
    expected = "".join(records.lines)
    # A foreign record's timestamp is taken when it is formatted, so twice differs.
    assert _STAMP.sub("T", out.getvalue()) == _STAMP.sub("T", expected)
    assert len(records.records) == 15
    assert WORKER_TOKEN not in out.getvalue() and API_TOKEN not in out.getvalue()
    assert out.getvalue().count("Traceback") == 3


def test_the_record_other_handlers_see_is_left_as_it_was() -> None:
    configure_logging("console", stream=io.StringIO())
    records = Records()
    logging.getLogger().addHandler(records)
    logging.getLogger().handlers.reverse()  # our handler formats before the other sees it
    structlog.get_logger("t").info("job ended", job_id="j_1")
    (record,) = records.records
    assert isinstance(record.msg, dict)
    assert record.msg["event"] == "job ended" and record.msg["job_id"] == "j_1"
    assert "_record" not in record.msg


def test_a_structlog_line_makes_one_log_record_not_two(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []
    factory = logging.getLogRecordFactory()

    def counting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made.append(args[0])
        return factory(*args, **kwargs)

    monkeypatch.setattr(logging, "_logRecordFactory", counting)
    out = io.StringIO()
    configure_logging("console", stream=out)
    structlog.get_logger("t").info("job ended", job_id="j_1")
    assert made == ["t"]
    assert "job ended" in out.getvalue()


_TEXT = st.text(alphabet=st.sampled_from(list("ab1_ .=\"'\t\n[]é-")), max_size=10)
_SECRETISH = st.sampled_from([WORKER_TOKEN, API_TOKEN, f"Bearer {API_TOKEN}", "ut_" + "x" * 20])
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), _TEXT, _SECRETISH),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_TEXT | _SECRETISH, inner, max_size=3)
    ),
    max_leaves=6,
)
_KEYS = st.sampled_from(
    ["job_id", "state", "reason", "token", "password", "worker_token", "a b", "exc", "x"]
)


@given(
    fmt=st.sampled_from(["console", "json"]),
    fields=st.dictionaries(_KEYS, _VALUES, max_size=6),
    event=_TEXT | _SECRETISH,
)
@settings(max_examples=150, deadline=None)
def test_any_event_renders_as_processor_formatter_renders_it(
    fmt: str, fields: dict[str, Any], event: str
) -> None:
    configure_logging(fmt, stream=io.StringIO())
    handler = installed()
    event_dict = {
        **fields,
        "event": event,
        "logger": "tunefleet.test",
        "level": "info",
        "timestamp": "2026-11-26T18:00:00.000001Z",
    }
    args, kwargs = structlog.stdlib.ProcessorFormatter.wrap_for_formatter(
        logging.getLogger("tunefleet.test"), "info", event_dict
    )
    record = logging.LogRecord("tunefleet.test", logging.INFO, "", 0, args[0], (), None)
    record.__dict__.update(kwargs["extra"])
    assert handler.format(record) == reference_formatter(handler).format(record)


def test_a_record_gathers_no_thread_or_process_that_no_line_renders() -> None:
    # Each costs a call per record (os.getpid() a system call, multiprocessing's current
    # process a lookup); the lines above stay what ProcessorFormatter writes without them.
    configure_logging("json", stream=io.StringIO())
    records = Records()
    logging.getLogger().addHandler(records)
    structlog.get_logger("tunefleet.actors.job_actor").info("job ended", job_id="j_1")
    (record,) = records.records
    assert (record.thread, record.threadName) == (None, None)
    assert (record.process, record.processName) == (None, None)
