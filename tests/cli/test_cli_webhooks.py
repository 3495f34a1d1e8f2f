"""`tunefleet webhooks add|list|test|deliveries|rotate-secret|remove` against a real
orchestrator (the shared one runs without --webhooks-allow-private, so loopback is
refused)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
Invoke = Callable[..., Result]
# Never resolves (.invalid): the test event stays pending or fails, nothing is reached.
URL = "https://hooks.example.invalid/tunefleet"


def _ok(tf: Invoke, *args: str) -> Result:
    result = tf(*args)
    assert result.exit_code == 0, result.output
    return result


def test_add_list_test_deliveries_and_remove(tf: Invoke) -> None:
    added = _ok(tf, "webhooks", "add", URL, "--event", "job.completed", "--format", "slack")
    assert added.stdout.startswith("Added webhook ")
    hook_id = added.stdout.split()[2]
    secret = added.stdout.strip().split()[-1]
    assert secret.startswith("whsec_")
    try:
        listed = _ok(tf, "webhooks", "list").stdout
        assert URL in listed and "slack" in listed and secret not in listed
        shown = json.loads(_ok(tf, "webhooks", "--json").stdout)
        assert secret not in json.dumps(shown)
        sent = _ok(tf, "webhooks", "test", hook_id).stdout
        assert sent.startswith("Sent test event ev_")
        log = json.loads(_ok(tf, "webhooks", "deliveries", hook_id, "--json").stdout)
        assert [d["event"] for d in log["deliveries"]] == ["webhook.test"]
        assert "webhook.test" in _ok(tf, "webhooks", "deliveries", hook_id).stdout
        rotated = _ok(tf, "webhooks", "rotate-secret", hook_id).stdout
        assert rotated.startswith(f"Webhook {hook_id} signs with a new secret")
        new = rotated.strip().split()[-1]
        assert new.startswith("whsec_") and new != secret
        given = json.loads(
            _ok(tf, "webhooks", "rotate-secret", hook_id, "--secret", "s" * 20, "--json").stdout
        )
        assert given["secret"] == "s" * 20
        short = tf("webhooks", "rotate-secret", hook_id, "--secret", "short")
        assert short.exit_code != 0 and "16" in short.output
    finally:
        _ok(tf, "webhooks", "remove", hook_id)
    assert URL not in _ok(tf, "webhooks", "list").stdout


def test_a_loopback_url_is_refused_with_the_reason(tf: Invoke) -> None:
    result = tf("webhooks", "add", "http://127.0.0.1:9/hook")
    assert result.exit_code != 0
    assert "loopback" in result.output and "--webhooks-allow-private" in result.output
    bad = tf("webhooks", "add", URL, "--worker-label", "nolabel")
    assert bad.exit_code != 0 and "KEY=VALUE" in bad.output
