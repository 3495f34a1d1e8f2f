"""Property: a query string with repeated parameters (``?status=a&status=b``, as browsers
and scripts send lists) gives every query model its value or a 400, never another
exception. tests/http/test_http_fuzz_bodies.py feeds single-valued mappings only, so the
multi-value path of ``parse_query_mapping`` is fuzzed here."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import MultiDict
from pydantic import BaseModel

from tests.security.conftest import fuzz_examples
from tunefleet.http.body import parse_query_mapping
from tunefleet.http.errors import MAX_DETAIL_CHARS, ApiError
from tunefleet.http.route_table import routes

QUERY_MODELS = sorted(
    {s.query_model for s in routes.specs if s.query_model}, key=lambda m: m.__name__
)
values = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", "0", "-1", "1e3", "true", "pending,running", "w_1", "²", "9" * 30]),
)


def names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()] + ["unknown"]


@pytest.mark.parametrize("model", QUERY_MODELS, ids=lambda m: m.__name__)
@settings(max_examples=fuzz_examples(40), deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_repeated_query_parameters(model: type[BaseModel], data: st.DataObject) -> None:
    pairs = data.draw(st.lists(st.tuples(st.sampled_from(names(model)), values), max_size=8))
    try:
        parsed = parse_query_mapping(MultiDict(pairs), model)
    except ApiError as error:
        assert error.status == 400
        assert error.detail and "\n" not in error.detail and len(error.detail) <= MAX_DETAIL_CHARS
        return
    assert isinstance(parsed, model)
    json.loads(parsed.model_dump_json())
