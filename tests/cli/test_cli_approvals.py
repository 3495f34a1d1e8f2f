"""`tunefleet approvals`, `approvals rules ...` and `jobs approve|reject` against a real
orchestrator. The rule matches only this test's GPU model, so the other tests' submits on
the shared orchestrator are never held; it is deleted at the end."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
Invoke = Callable[..., Result]
NOWHERE = ("--label", "pool=nowhere", "--target", "worker")  # stays pending once approved


def _ok(tf: Invoke, *args: str) -> Result:
    result = tf(*args)
    assert result.exit_code == 0, result.output
    return result


def _held(tf: Invoke) -> str:
    args = ("jobs", "submit", "quick", *NOWHERE, "--gpu-name", "cli-approval-h100", "--json")
    data = json.loads(_ok(tf, *args).stdout)
    assert data["status"] == "pending_approval"
    return str(data["job_id"])


def test_rules_hold_a_job_and_the_cli_approves_and_rejects(tf: Invoke) -> None:
    added = _ok(tf, "approvals", "rules", "add", "hardware_type", "cli-approval-*")
    assert added.stdout.startswith("Added approval rule ")
    rule_id = added.stdout.split()[3].rstrip(":")
    assert "GPU model matches cli-approval-*" in _ok(tf, "approvals", "rules").stdout
    try:
        first, second = _held(tf), _held(tf)
        waiting = _ok(tf, "approvals").stdout
        assert first in waiting and second in waiting
        approved = _ok(tf, "jobs", "approve", first)
        assert approved.stdout.strip() == f"Approved {first}; it is pending."
        rejected = _ok(tf, "jobs", "reject", second, "--reason", "too big")
        assert rejected.stdout.strip() == f"Rejected {second}; it is cancelled."
        shown = json.loads(_ok(tf, "jobs", "show", second, "--json").stdout)
        assert shown["error"].endswith(": too big")
        again = tf("jobs", "approve", first)
        assert again.exit_code != 0
        assert "not awaiting approval" in again.output
        assert first not in _ok(tf, "approvals").stdout
    finally:
        _ok(tf, "approvals", "rules", "delete", rule_id)
    left = json.loads(_ok(tf, "approvals", "rules", "--json").stdout)["rules"]
    assert int(rule_id) not in [rule["id"] for rule in left]


def test_a_bad_rule_says_what_to_send(tf: Invoke) -> None:
    result = tf("approvals", "rules", "add", "gpus_exceed", "four")
    assert result.exit_code != 0
    assert "threshold: gpus_exceed needs a number" in result.output
