"""redact_secrets' fast path for plain fields masks exactly what the general walk does."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tunefleet.logging import _redact_item, redact_secrets

_TOKEN = "wt_" + "A" * 20
_KEYS = st.sampled_from(["event", "job_id", "token", "worker_token", "password", "note", "x"])
_TEXT = st.sampled_from(["plain", "", f"saw {_TOKEN} here", _TOKEN, "tf_short", "newt_abcdefgh"])
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    _TEXT,
    st.lists(_TEXT, max_size=2),
    st.dictionaries(st.sampled_from(["token", "name"]), _TEXT, max_size=2),
)


@given(st.dictionaries(_KEYS, _VALUES, max_size=7))
def test_redact_secrets_equals_the_general_walk(event_dict: dict[str, Any]) -> None:
    expected = {key: _redact_item(key, value, 0) for key, value in event_dict.items()}
    assert redact_secrets(None, "info", dict(event_dict)) == expected


def test_plain_fields_are_kept_and_tokens_masked() -> None:
    out = redact_secrets(
        None,
        "info",
        {"event": f"got {_TOKEN}", "job_id": "j_1", "n": 3, "reason": None, "token": "x"},
    )
    assert out == {
        "event": "got wt_…AAAA",
        "job_id": "j_1",
        "n": 3,
        "reason": None,
        "token": "[redacted]",
    }
