"""Console log lines without colours, as ``structlog.dev.ConsoleRenderer`` writes them,
at a fraction of its cost.

The server writes one INFO line per job end and per worker change. ConsoleRenderer
builds each line through a column object, a StringIO and a padding call per field:
about a quarter of a line's CPU. This renderer writes the same text directly for the
usual line (no colours, no exception, no stack) and hands any other line to
ConsoleRenderer itself; tests hold the two to the same output.
"""

from __future__ import annotations

from typing import Any

from structlog.dev import ConsoleRenderer, KeyValueColumnFormatter, LogLevelColumnFormatter
from structlog.typing import EventDict, WrappedLogger

# ConsoleRenderer quotes a string holding one of these, and shows any other as it is.
_QUOTED = frozenset(" \t=\r\n\"'")
# Fields ConsoleRenderer renders apart from the key=value list.
_SPECIAL = ("stack", "exception", "exc_info")


class PlainConsoleRenderer:
    """ConsoleRenderer(colors=False)'s lines, written without its column machinery."""

    def __init__(self) -> None:
        self.fallback = ConsoleRenderer(colors=False)
        level_width = 0
        event_width = 0
        for column in self.fallback.columns:
            if column.key == "level" and isinstance(column.formatter, LogLevelColumnFormatter):
                level_width = column.formatter.width
            elif column.key == "event" and isinstance(column.formatter, KeyValueColumnFormatter):
                event_width = column.formatter.width
        self._level_width = level_width
        self._event_width = event_width

    def __call__(self, logger: WrappedLogger, name: str, event_dict: EventDict) -> str:
        if not event_dict.keys().isdisjoint(_SPECIAL):
            return self.fallback(logger, name, event_dict)
        missing = _MISSING
        parts: list[str] = []
        if (timestamp := event_dict.pop("timestamp", missing)) is not missing:
            parts.append(str(timestamp))
        if (level := event_dict.pop("level", missing)) is not missing:
            parts.append(f"[{str(level).ljust(self._level_width)}]")
        if (event := event_dict.pop("event", missing)) is not missing:
            parts.append(str(event).ljust(self._event_width))
        if (logger_name := event_dict.pop("logger", missing)) is not missing:
            parts.append(f"[{logger_name}]")
        if (logger_name := event_dict.pop("logger_name", missing)) is not missing:
            parts.append(f"[{logger_name}]")
        for key in sorted(event_dict):
            parts.append(f"{key}={_repr(event_dict[key])}")
        return " ".join(part for part in parts if part).rstrip(" ")


_MISSING: Any = object()


def _repr(value: object) -> str:
    if isinstance(value, str):
        return repr(value) if not _QUOTED.isdisjoint(value) else value
    return repr(value)
