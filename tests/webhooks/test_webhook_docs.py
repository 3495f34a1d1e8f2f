"""docs/webhooks.md's verification snippet is run as written: it accepts a delivery
signed with the subscription's secret and refuses a bad secret, a changed body and an
old timestamp (issue 27: verification in five lines of Python)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from tunefleet.webhooks.events import EVENT_KINDS
from tunefleet.webhooks.signing import signature

DOC = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"


def _snippet() -> str:
    text = DOC.read_text()
    found = re.search(r"<!-- verify-snippet -->\n```python\n(.*?)```", text, re.S)
    assert found, "docs/webhooks.md lost its verification snippet"
    return found.group(1)


def test_the_snippet_is_five_lines_and_verifies_a_delivery() -> None:
    code = _snippet()
    assert len(code.strip().splitlines()) == 5
    namespace: dict[str, Any] = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    verify = namespace["verify"]
    secret, body, now = "whsec_" + "x" * 30, b'{"type":"job.completed"}', int(time.time())
    header = signature(secret, now, body)
    assert verify(secret, header, body)
    assert not verify("whsec_a-bad-secret-for-sure", header, body)  # a bad secret
    assert not verify(secret, header, body + b" ")
    assert not verify(secret, signature(secret, now - 3600, body), body)  # replayed


def test_every_event_is_documented() -> None:
    text = DOC.read_text()
    missing = [kind for kind in EVENT_KINDS if f"| `{kind}` |" not in text]
    assert missing == []
