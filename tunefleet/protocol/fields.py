"""Building blocks of the wire models: base models, bounded strings, labels, JSON blobs.

Every string a client sends is bounded. What agents send to the worker endpoints ignores
unknown fields (SimpleTuner's agent, and newer tunefleet agents, may send more than this
version knows), and so does what an agent reads from the orchestrator. The HTTP room's
user-facing schemas (tunefleet/http/schemas_*.py) build on these too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
)
from pydantic_core import PydanticUseDefault

from tunefleet.protocol.status import ReportedStatusName

DEFAULT_MAX_STRING = 4096

WorkerType = Literal["persistent", "ephemeral"]
ReportedJobStatus = ReportedStatusName
LogStream = Literal["stdout", "stderr"]


class RequestModel(BaseModel):
    """An agent's request body, or a query: extra fields ignored, no NaN/Infinity. Every
    string field declares its own bound (a test checks the JSON schema of each request)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, hide_input_in_errors=True)


class ResponseModel(BaseModel):
    """A response body; documentation and tests build from these."""

    model_config = ConfigDict(extra="ignore")


# --- strings ---------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NAME = re.compile(r"[A-Za-z0-9._-]+")
_IDENTIFIER = re.compile(r"[A-Za-z0-9._:-]+")
_LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
MAX_LABELS = 64
MAX_LABEL_KEY = 128
MAX_LABEL_VALUE = 256


def _no_control(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters (newlines, tabs, NUL)")
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _plain_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError("use only letters, digits, '.', '_' and '-'")
    return value


def _identifier(value: str) -> str:
    if not _IDENTIFIER.fullmatch(value):
        raise ValueError("must be an id of letters, digits, '.', '_', ':' and '-'")
    return value


def _scalar_to_str(value: Any) -> Any:
    # Numbers arrive where a version string is meant ("driver": 12.4); keep them as text.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def truncating(max_chars: int) -> Callable[[Any], Any]:
    """Cut over-long text instead of refusing it: for what an agent reports about a run
    (an error, a log line), where losing the report would be worse than shortening it."""

    def cut(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        value = value.replace("\x00", "\ufffd")
        if len(value) > max_chars:
            marker = f" …[{len(value) - max_chars + 40} chars cut]"
            return value[: max_chars - len(marker)] + marker
        return value

    return cut


# One line of text a person reads (names of things, free-text fields): no control chars.
ShortText = Annotated[str, Field(max_length=256), AfterValidator(_no_control)]
# Longer free text (reasons); newlines allowed, NUL not.
LongText = Annotated[str, Field(max_length=DEFAULT_MAX_STRING), AfterValidator(_no_nul)]
# Names an admin gives: workers, API tokens.
PlainName = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_plain_name)]
# Ids of workers and jobs as clients echo them back.
Identifier = Annotated[str, Field(min_length=1, max_length=128), AfterValidator(_identifier)]
# Versions and short technical words ("12.4", "cuda"); numbers are accepted as text.
VersionText = Annotated[
    str, BeforeValidator(_scalar_to_str), Field(max_length=64), AfterValidator(_no_control)
]


# --- labels ----------------------------------------------------------------------------


def scalars_as_text(value: Any) -> Any:
    """A JSON object's booleans and numbers as the text a label or an environment
    variable holds (true → "true", 2 → "2"); anything else is left to the validators."""
    if isinstance(value, dict):
        return {
            k: _scalar_to_str(v) if not isinstance(v, bool) else str(v).lower()
            for k, v in value.items()
        }
    return value


def _check_labels(labels: dict[str, str]) -> dict[str, str]:
    if len(labels) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} labels")
    for key, value in labels.items():
        shown = json.dumps(key[:40])
        if not (len(key) <= MAX_LABEL_KEY and _LABEL_KEY.fullmatch(key)):
            raise ValueError(
                f"label key {shown} must be 1-{MAX_LABEL_KEY} letters, digits, '.', '_', '/' "
                "or '-', starting with a letter or digit"
            )
        if len(value) > MAX_LABEL_VALUE or _CONTROL.search(value):
            raise ValueError(
                f"label {shown} must be at most {MAX_LABEL_VALUE} characters without control "
                "characters"
            )
    return labels


# Label values may be sent as numbers or booleans; they are kept as text.
Labels = Annotated[
    dict[
        Annotated[str, Field(min_length=1, max_length=MAX_LABEL_KEY)],
        Annotated[str, Field(max_length=MAX_LABEL_VALUE)],
    ],
    BeforeValidator(scalars_as_text),
    AfterValidator(_check_labels),
]
# A job's label requirements: the same shape; each value is a glob ("a100*").
LabelGlobs = Labels


# --- free-form JSON (training configs, progress) ---------------------------------------


def json_object_limit(max_bytes: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def check(value: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(value, ensure_ascii=False)) > max_bytes:
            raise ValueError(f"over {max_bytes // 1024} KiB as JSON; send a smaller object")
        _check_no_nul(value)
        return value

    return check


def _check_no_nul(value: Any) -> None:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                raise ValueError("must not contain NUL characters in its strings")
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _object_or_list(value: Any) -> Any:
    if value is not None and not isinstance(value, dict | list):
        raise ValueError("must be a JSON object or list")
    _check_no_nul(value)
    if len(json.dumps(value, ensure_ascii=False)) > 512 * 1024:
        raise ValueError("over 512 KiB as JSON; send a smaller one")
    return value


JsonKey = Annotated[str, Field(max_length=1024)]
# A training configuration (SimpleTuner's config.json as an object).
ConfigObject = Annotated[dict[JsonKey, Any], AfterValidator(json_object_limit(512 * 1024))]
# What an agent reports about a run (step, loss, ...): small, it is kept per worker.
ProgressObject = Annotated[dict[JsonKey, Any], AfterValidator(json_object_limit(64 * 1024))]
# A data-loader configuration: SimpleTuner's is a list of datasets; an object is allowed too.
DataloaderJson = Annotated[
    Any,
    AfterValidator(_object_or_list),
    WithJsonSchema({"anyOf": [{"type": "object"}, {"type": "array"}, {"type": "null"}]}),
]


# --- reading what the other side may say differently -----------------------------------


def _default_if_unreadable(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(value)
    except ValidationError:
        raise PydanticUseDefault() from None


# A field read as absent (its default) when it cannot be read: for what an agent reads
# from an orchestrator that may be SimpleTuner's own or newer than itself, where one odd
# field must not cost the whole message.
Forgiving = WrapValidator(_default_if_unreadable)
