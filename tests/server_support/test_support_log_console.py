"""PlainConsoleRenderer writes exactly what structlog's ConsoleRenderer(colors=False) does."""

from __future__ import annotations

import sys
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from structlog.dev import ConsoleRenderer

from tunefleet.log_console import PlainConsoleRenderer

_KEYS = st.sampled_from(
    ["timestamp", "level", "event", "logger", "logger_name", "job_id", "state", "reason", "a b"]
)
_TEXT = st.text(alphabet=st.sampled_from(list("ab1_ .=\"'\t\n[]é")), max_size=12)
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    _TEXT,
    st.lists(_TEXT, max_size=2),
    st.dictionaries(_TEXT, st.integers(), max_size=2),
)


def _both(event_dict: dict[str, Any]) -> tuple[str, str]:
    plain = PlainConsoleRenderer()(None, "info", dict(event_dict))
    console = ConsoleRenderer(colors=False)(None, "info", dict(event_dict))
    return plain, console


def _level_is_text(event_dict: dict[str, Any]) -> dict[str, Any]:
    # structlog's add_log_level always sets a string; ConsoleRenderer fails on others.
    if "level" in event_dict:
        event_dict["level"] = str(event_dict["level"])
    return event_dict


@given(st.dictionaries(_KEYS, _VALUES, max_size=9).map(_level_is_text))
def test_any_usual_line_matches_console_renderer(event_dict: dict[str, Any]) -> None:
    plain, console = _both(event_dict)
    assert plain == console


def test_the_server_job_line_matches_console_renderer() -> None:
    plain, console = _both(
        {
            "timestamp": "2026-11-26T15:52:38.894061Z",
            "level": "info",
            "event": "job ended",
            "logger": "tunefleet.actors.job_actor",
            "job_id": "j_abcdef123456",
            "state": "completed",
            "reason": None,
        }
    )
    assert plain == console
    assert plain.startswith("2026-11-26T15:52:38.894061Z [info     ] job ended      ")


def test_lines_with_a_traceback_or_stack_are_console_renderer_s() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    for extra in ({"exc_info": exc_info}, {"exception": "Traceback..."}, {"stack": "stack..."}):
        plain, console = _both({"event": "failed", "level": "error", **extra})
        assert plain == console
        assert "\n" in plain
