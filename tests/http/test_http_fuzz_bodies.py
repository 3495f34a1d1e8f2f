"""Property: whatever a client sends to any request model, the answer is the model or a 4xx
ApiError with a short one-line detail; never another exception (a 500)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tunefleet.http.body import parse_json_bytes, parse_query_mapping
from tunefleet.http.errors import MAX_DETAIL_CHARS, ApiError
from tunefleet.http.schemas import REQUEST_MODELS

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
# Values that sit on the edges the models care about.
edge_values = st.sampled_from(
    [
        "",
        " ",
        "a" * 300,
        "x" * 9000,
        "a\nb",
        "a\u0000b",
        "../x",
        "w_1",
        "j_1",
        "idle",
        "pending,running",
        "training",
        "stdout",
        "admin.workers",
        "python -m 'x",
        "2024-01-15T10:30:00Z",
        -1,
        0,
        1,
        101,
        1001,
        2**31,
        1.5,
        1e308,
        [],
        {},
        ["x"],
        [1, 2],
        {"gpu_type": "a100*"},
        {"": ""},
        {"A": 1},
        {"seq": 1, "stream": "stdout", "line": "x", "at": 1},
        [{"seq": 1, "stream": "stdout", "line": "x", "at": 1}],
        {"name": "A100", "count": 2, "vram_gb": 80},
    ]
)


def field_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def shaped_bodies(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects using the model's own field names, so validation goes deep."""
    names = [*field_names(model), "unknown_field"]
    return st.dictionaries(st.sampled_from(names), json_values | edge_values, max_size=len(names))


def check(model: type[BaseModel], outcome: Any) -> None:
    if isinstance(outcome, ApiError):
        assert 400 <= outcome.status < 500, outcome
        assert outcome.detail.strip()
        assert "\n" not in outcome.detail
        assert len(outcome.detail) <= MAX_DETAIL_CHARS
    else:
        assert isinstance(outcome, model)
        # Whatever is accepted can be stored and sent back as JSON.
        json.loads(outcome.model_dump_json())


def run(model: type[BaseModel], raw: bytes) -> Any:
    try:
        return parse_json_bytes(raw, model)
    except ApiError as error:
        return error


@pytest.mark.parametrize("model", REQUEST_MODELS, ids=lambda m: m.__name__)
@SETTINGS
@given(data=st.data())
def test_random_json_bodies(model: type[BaseModel], data: st.DataObject) -> None:
    body = data.draw(json_values | shaped_bodies(model))
    check(model, run(model, json.dumps(body).encode()))


@pytest.mark.parametrize("model", REQUEST_MODELS, ids=lambda m: m.__name__)
@SETTINGS
@given(raw=st.binary(max_size=80))
def test_random_bytes(model: type[BaseModel], raw: bytes) -> None:
    check(model, run(model, raw))


@pytest.mark.parametrize("model", REQUEST_MODELS, ids=lambda m: m.__name__)
@SETTINGS
@given(data=st.data())
def test_random_query_strings(model: type[BaseModel], data: st.DataObject) -> None:
    names = [*field_names(model), "unknown"]
    query = data.draw(st.dictionaries(st.sampled_from(names), st.text(max_size=30)))
    try:
        outcome: Any = parse_query_mapping(query, model)
    except ApiError as error:
        outcome = error
    check(model, outcome)
