"""`tunefleet tokens ...` and `tunefleet audit ...` against a real orchestrator."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
Invoke = Callable[..., Result]


def test_create_prints_the_token_once_and_it_works(tf: Invoke) -> None:
    result = tf("tokens", "create", "ci", "-p", "queue.submit", "-p", "audit.read")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Created API token ci (id ")
    assert lines[0].endswith("with queue.submit, audit.read.")
    token = lines[2].strip()
    assert token.startswith("tf_")
    assert lines[4].strip() == f"export TUNEFLEET_TOKEN={token}"
    assert tf("audit", "verify", token=token).exit_code == 0


def test_create_needs_a_known_permission(tf: Invoke) -> None:
    result = tf("tokens", "create", "x", "--permission", "everything")
    assert result.exit_code == 2 and "--permission" in result.stderr


def test_create_without_permissions_gets_what_the_users_role_allows(tf: Invoke) -> None:
    created = json.loads(tf("tokens", "create", "everything-mine", "--json").stdout)
    assert created["user"] == "admin"
    assert "admin.users" in created["permissions"] and "usage.read" in created["permissions"]


def test_whoami_shows_what_the_token_may_and_may_not_do(tf: Invoke) -> None:
    created = json.loads(tf("tokens", "create", "ci", "-p", "queue.submit", "--json").stdout)
    mine = tf("tokens", "whoami", token=created["token"])
    assert mine.exit_code == 0, mine.output
    lines = mine.stdout.splitlines()
    assert lines[0] == f"API token ci (id {created['id']})."
    held = {line.split()[0]: line.split()[1] for line in lines[2:] if line.strip()}
    assert held["queue.submit"] == "yes"
    assert held["queue.command"] == held["queue.local"] == held["admin.workers"] == "no"
    data = json.loads(tf("tokens", "whoami", "--json", token=created["token"]).stdout)
    assert data == {
        "kind": "api", "id": created["id"], "name": "ci", "permissions": ["queue.submit"],
        "user": "admin", "role": "admin", "teams": ["default"], "default_team": "default",
    }  # fmt: skip
    assert lines[1] == "User admin, role admin, teams default (default default)."
    admin = json.loads(tf("tokens", "whoami", "--json").stdout)
    assert "queue.command" in admin["permissions"] and "queue.local" in admin["permissions"]


def test_list_table_json_and_revoke(tf: Invoke) -> None:
    created = json.loads(
        tf("tokens", "create", "short-lived", "-p", "queue.submit", "--json").stdout
    )
    token_id, token = created["id"], created["token"]
    assert created["created_at"].endswith("Z")

    table = tf("tokens", "list")
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[0].split() == [
        "ID", "NAME", "USER", "PERMISSIONS", "CREATED", "LAST", "USED", "STATE",
    ]  # fmt: skip
    row = next(line for line in table.stdout.splitlines() if "short-lived" in line)
    assert row.split()[0] == token_id and "queue.submit" in row and row.rstrip().endswith("active")
    listed = json.loads(tf("tokens", "list", "--json").stdout)
    assert all("token" not in t for t in listed["tokens"])  # never the secret itself

    revoked = tf("tokens", "revoke", token_id)
    assert revoked.exit_code == 0, revoked.output
    assert (
        revoked.stdout.strip()
        == f"Revoked API token {token_id}; requests with it now get HTTP 401."
    )
    assert tf("jobs", "list", token=token).exit_code == 4
    after = next(line for line in tf("tokens", "list").stdout.splitlines() if "short-lived" in line)
    assert "revoked just now" in after
    again = tf("tokens", "revoke", token_id, "--json")
    assert again.exit_code == 1 and "already revoked" in again.stderr


def test_audit_list_table_json_and_filters(tf: Invoke) -> None:
    made = json.loads(tf("workers", "create", "audited-1", "--json").stdout)
    table = tf("audit", "list", "--kind", "worker.created", "--since", "1h")
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[0].split() == [
        "ID", "WHEN", "KIND", "ACTOR", "TARGET", "OUTCOME", "DETAIL",
    ]  # fmt: skip
    row = next(line for line in table.stdout.splitlines() if made["worker_id"] in line)
    assert "worker.created" in row and "just now" in row and "name=audited-1" in row
    data = json.loads(tf("audit", "list", "--target", made["worker_id"], "--json").stdout)
    assert [e["kind"] for e in data["events"]] == ["worker.created"]
    assert data["events"][0]["at"].endswith("Z")
    future = tf("audit", "list", "--since", "2999-01-01T00:00:00Z")
    assert future.stdout.strip() == "No audit events match."


@pytest.mark.parametrize("bad", ["2x", "yesterday-ish", "nan", "2024-13-01"])
def test_audit_time_that_is_not_a_time_is_a_usage_error_naming_every_form(
    tf: Invoke, bad: str
) -> None:
    for option in ("--since", "--until"):
        result = tf("audit", "list", option, bad)
        assert result.exit_code == 2, result.output
        assert f"Invalid value for '{option}': '{bad}' is not a time" in result.stderr
        for form in ("30m", "2h", "1d", "ISO 8601 (2024-01-15T10:30:00Z)", "unix seconds"):
            assert form in result.stderr


@pytest.mark.parametrize("good", ["90s", "1.5h", "30 min", "1D", "1700000000", "2024-01-15"])
def test_audit_time_accepts_every_documented_form(tf: Invoke, good: str) -> None:
    result = tf("audit", "list", "--since", good, "--limit", "1")
    assert result.exit_code == 0, result.output


def test_audit_list_pages_and_shows_lists_plainly(tf: Invoke) -> None:
    tf("tokens", "create", "audited-token", "-p", "queue.submit", "-p", "audit.read")
    table = tf("audit", "list", "--kind", "api_token.created")
    row = next(line for line in table.stdout.splitlines() if "name=audited-token" in line)
    assert "permissions=queue.submit,audit.read" in row
    first_page = tf("audit", "list", "--limit", "1")
    assert first_page.stdout.splitlines()[-1] == "older events: --offset 1"


def test_audit_verify_table_and_json(tf: Invoke) -> None:
    result = tf("audit", "verify")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "The audit chain is intact."
    data = json.loads(tf("audit", "verify", "--json").stdout)
    assert data["ok"] is True and data["first_bad_id"] is None
