"""Reading request bodies and query strings into pydantic models, with one-line errors.

Error scheme (docs/api.md, "Errors"): anything wrong with what the client sent is
**400** with a detail naming the field and what to send (``gpu_count: must be ≥ 0``):
unreadable JSON, a body that is not an object, a missing field, a wrong type or value,
a bad query parameter. A body over the size limit is **413**. Nothing a client sends
can produce a 500.

The body is read as JSON whatever its Content-Type, because the seed document's own
curl examples send none.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from collections.abc import Mapping
from typing import Any, TypeVar

from aiohttp import web
from multidict import MultiMapping
from pydantic import BaseModel, ValidationError

from tunefleet.http.errors import ApiError, one_line

M = TypeVar("M", bound=BaseModel)

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 32
_READ_CHUNK = 64 * 1024
_RAW_BODY_KEY = web.RequestKey("tunefleet_raw_body", bytes)
_MAX_LOC_KEY_CHARS = 40


def human_size(n_bytes: int) -> str:
    """1048576 → "1 MiB"; sizes that are not whole KiB/MiB stay in bytes."""
    for unit, size in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if n_bytes >= size and n_bytes % size == 0:
            return f"{n_bytes // size} {unit}"
    return f"{n_bytes} bytes"


def too_large(max_bytes: int) -> ApiError:
    return ApiError(413, f"request body over {human_size(max_bytes)}; send less")


async def read_body(request: web.Request, max_bytes: int | None = None) -> bytes:
    """The raw body, at most ``max_bytes`` (413 beyond), read once and kept on the request.

    Reads the stream itself rather than ``request.read()`` so that the limit can differ
    per endpoint from the application's ``client_max_size``, which is the limit otherwise
    (``Limits.max_body_bytes``, ``--max-body-bytes``).
    """
    if max_bytes is None:
        max_bytes = request.client_max_size
    # Only a stream read to its end can have left a body here; asking first would look
    # for it on every request, and a miss raises and catches a KeyError inside aiohttp.
    if request.content.at_eof():
        cached = request.get(_RAW_BODY_KEY)
        if cached is not None:
            return cached
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise too_large(max_bytes)
    if declared is not None:
        # The parser hands over exactly Content-Length bytes: one read, no second one to
        # find the end, no copy through a buffer (every heartbeat comes this way).
        raw = await _read_exactly(request, declared)
        request[_RAW_BODY_KEY] = raw
        return raw
    buffer = bytearray()
    while True:
        chunk = await request.content.read(_READ_CHUNK)
        if not chunk:
            break
        buffer += chunk
        if len(buffer) > max_bytes:
            raise too_large(max_bytes)
    raw = bytes(buffer)
    request[_RAW_BODY_KEY] = raw
    return raw


async def _read_exactly(request: web.Request, n_bytes: int) -> bytes:
    if n_bytes == 0:
        return b""
    try:
        return await request.content.readexactly(n_bytes)
    except asyncio.IncompleteReadError as short:
        return short.partial  # what arrived; the JSON parse says what is wrong with it


async def parse_body(request: web.Request, model: type[M], *, max_bytes: int | None = None) -> M:
    """The request body as ``model``, or an ApiError (400/413) with a one-line detail;
    ``max_bytes`` defaults to the application's body limit (``read_body``)."""
    if max_bytes is None:
        max_bytes = request.client_max_size
    raw = await read_body(request, max_bytes)
    return parse_json_bytes(raw, model, max_bytes=max_bytes)


def parse_json_bytes(raw: bytes, model: type[M], *, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> M:
    """The pure half of ``parse_body``: bytes in, model or ApiError out."""
    if len(raw) > max_bytes:
        raise too_large(max_bytes)
    if not raw.strip():
        required = required_fields(model)
        if required:
            raise ApiError(
                400, f"empty request body; send a JSON object with {', '.join(required)}"
            )
        return validate(model, {})
    data = decode_json(raw)
    if not isinstance(data, dict):
        raise ApiError(
            400, f"request body must be a JSON object, not {_json_kind(data)}; send {{...}}"
        )
    return validate(model, data)


def decode_json(raw: bytes) -> Any:
    """Parse JSON strictly: UTF-8, no NaN/Infinity, bounded nesting, encodable strings."""
    try:
        # What json.loads does with bytes (UTF-16/32 detected, a UTF-8 BOM dropped), with
        # one decoder made once: loads() with parse_constant builds a new one every call.
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
        data = _DECODER.decode(text)
    except json.JSONDecodeError as error:
        raise _malformed(f"{error.msg} at line {error.lineno} column {error.colno}") from None
    except RecursionError:
        raise _malformed(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as error:
        # Not UTF-8, NaN/Infinity, or a number with more digits than Python will parse.
        raise _malformed(_short_reason(error)) from None
    problem = _tree_problem(data) if _may_be_unsafe(text) else None
    if problem:
        raise _malformed(problem)
    return data


def _may_be_unsafe(text: str) -> bool:
    """Whether the tree walk could find anything, from the text alone (cheap, and false
    for every body the agents send): fewer brackets than the depth limit cannot nest past
    it, and an unpaired surrogate needs a non-ASCII character or a \\u escape."""
    too_deep = text.count("[") + text.count("{") >= MAX_JSON_DEPTH
    return too_deep or not text.isascii() or "\\u" in text


def _malformed(reason: str) -> ApiError:
    return ApiError(400, f"malformed JSON: {reason}; send a JSON object")


def _short_reason(error: ValueError) -> str:
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    if "digits" in str(error):
        return "a number with more digits than allowed (4300)"
    return one_line(str(error).split(";")[0], 80)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _tree_problem(data: Any) -> str | None:
    """Depth and string checks, iteratively (a recursive walk could itself overflow)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            if not _encodable(node):
                return "a string holds an unpaired surrogate escape (\\ud800-\\udfff)"
            continue
        if not isinstance(node, dict | list):
            continue
        if depth >= MAX_JSON_DEPTH:
            return f"nested deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(node, dict):
            for key, value in node.items():
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
        else:
            stack.extend((item, depth + 1) for item in node)
    return None


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array"


def required_fields(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items() if f.is_required()]


def validate(model: type[M], data: Mapping[str, Any]) -> M:
    """``model.model_validate`` with pydantic's errors turned into a 400 ApiError."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ApiError(400, validation_detail(error, model)) from None


def parse_query(request: web.Request, model: type[M]) -> M:
    """The query string as ``model`` (400 with a one-line detail when it does not fit)."""
    return parse_query_mapping(request.query, model)


def parse_query_mapping(query: Mapping[str, str], model: type[M]) -> M:
    """Only the model's own parameters are read; a repeated one arrives as a list, so
    list fields can take ``?status=a&status=b`` (and split ``a,b`` themselves)."""
    data: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key not in query:
            continue
        values = query.getall(key) if isinstance(query, MultiMapping) else [query[key]]
        data[key] = values[0] if len(values) == 1 else list(values)
    return validate(model, data)


# --- turning pydantic's errors into one line ------------------------------------------

_SIMPLE_MESSAGES = {
    "missing": "required",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "string_unicode": "must be a string",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "extra_forbidden": "unknown field; remove it",
    "none_required": "must be null",
}


def validation_detail(error: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line for the first problem, naming the field: ``gpu_count: must be ≥ 0``; an
    unknown field of ``model`` is named with the closest known one."""
    problems = error.errors(include_url=False, include_input=True)
    if not problems:
        return "request does not fit this endpoint; see docs/api.md"
    # An unknown field is the likeliest cause of everything else (a misspelt required
    # field is also "missing"), so it is the one named.
    first = next((p for p in problems if p["type"] == "extra_forbidden"), problems[0])
    if first["type"] == "extra_forbidden" and model is not None:
        return one_line(unknown_field_detail(first["loc"], model, len(problems) - 1))
    where = format_loc(first["loc"])
    text = _message(first["type"], first.get("ctx") or {}, first["msg"])
    key = bool(first["loc"]) and first["loc"][-1] == "[key]"
    if key and first["type"] == "string_too_long" and isinstance(first.get("input"), str):
        # The location shows an over-long key cut short: say how long it was.
        text = f"is {len(first['input'])} characters long; {text}"
    line = f"{where}: {text}" if where else text
    if len(problems) > 1:
        more = len(problems) - 1
        line += f" (and {more} more problem{'s' if more > 1 else ''})"
    return one_line(line)


def unknown_field_detail(loc: tuple[int | str, ...], model: type[BaseModel], more: int) -> str:
    """``unknown field 'worker_label' (did you mean 'worker_labels'?)``."""
    name = str(loc[-1]) if loc else "?"
    shown = json.dumps(name[:_MAX_LOC_KEY_CHARS] + ("…" if len(name) > _MAX_LOC_KEY_CHARS else ""))
    shown = "'" + shown[1:-1].replace("'", "\\'") + "'"
    where = format_loc(loc[:-1])
    line = f"unknown field {shown}" + (f" in {where}" if where else "")
    known = _field_names(model, loc[:-1])
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        line += f" (did you mean '{close[0]}'?)"
    elif known:
        line += f"; the fields are {', '.join(known)}"
    if more:
        line += f" (and {more} more problem{'s' if more > 1 else ''})"
    return line


def _field_names(model: type[BaseModel], path: tuple[int | str, ...]) -> list[str]:
    """The wire names of the fields of the model found at ``path`` under ``model``."""
    current: Any = model
    for part in path:
        field = current.model_fields.get(part) if isinstance(part, str) else None
        nested = field.annotation if field is not None else None
        nested = next((a for a in (nested, *getattr(nested, "__args__", ())) if _is_model(a)), None)
        if nested is None:
            return []
        current = nested
    return [f.alias or name for name, f in current.model_fields.items()]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def format_loc(loc: tuple[int | str, ...]) -> str:
    """("lines", 3, "line") → ``lines[3].line``; odd or long dict keys are quoted, and a
    long one is cut with "…" so that what is wrong with it still fits the line."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            out += " (key)"
        elif part.isidentifier() and len(part) <= _MAX_LOC_KEY_CHARS:
            out += f".{part}" if out else part
        elif len(part) > _MAX_LOC_KEY_CHARS:
            out += f'[{json.dumps(part[:_MAX_LOC_KEY_CHARS])[:-1]}…"]'
        else:
            out += f"[{json.dumps(part)}]"
    return out


def _items(n: object) -> str:
    return f"{n} item" if n == 1 else f"{n} items"


def _message(kind: str, ctx: Mapping[str, Any], msg: str) -> str:
    if kind in _SIMPLE_MESSAGES:
        return _SIMPLE_MESSAGES[kind]
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    bounds = {
        "greater_than_equal": ("≥", "ge"),
        "greater_than": (">", "gt"),
        "less_than_equal": ("≤", "le"),
        "less_than": ("<", "lt"),
    }
    if kind in bounds:
        symbol, key = bounds[kind]
        bound = ctx.get(key)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {symbol} {bound}"
    if kind == "string_too_short":
        n = ctx.get("min_length", 1)
        return "must not be empty" if n == 1 else f"must be at least {n} characters"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "too_short":
        return f"must have at least {_items(ctx.get('min_length'))}"
    if kind == "too_long":
        return f"must have at most {_items(ctx.get('max_length'))}"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx.get('expected')}"
    if msg.startswith("Input should be "):
        return "must be " + msg.removeprefix("Input should be ")
    return msg[:1].lower() + msg[1:]
