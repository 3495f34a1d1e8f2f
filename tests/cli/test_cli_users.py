"""`tunefleet users ...`, `tunefleet teams ...`, `tokens create --user` and
`jobs list --user/--team` against a real orchestrator (names unique per test: the
orchestrator is shared by the session)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from click.testing import Result

from tests.e2e.harness import Orchestrator

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
Invoke = Callable[..., Result]


def _ok(tf: Invoke, *args: str, token: str | None = None, input: str | None = None) -> Result:
    result = tf(*args, input=input) if token is None else tf(*args, token=token, input=input)
    assert result.exit_code == 0, result.output
    return result


def test_users_and_teams_are_made_shown_and_listed(tf: Invoke) -> None:
    _ok(tf, "teams", "create", "cli-ml")
    _ok(tf, "teams", "create", "cli-vision")
    made = _ok(tf, "users", "create", "cli-alice", "--role", "lead", "--team", "cli-ml",
               "--team", "cli-vision", "--grant", "queue.command")  # fmt: skip
    assert made.stdout.splitlines()[0] == "Created user cli-alice."
    shown = _ok(tf, "users", "show", "cli-alice").stdout
    assert "cli-ml (default), cli-vision" in shown
    assert "queue.submit, queue.command, queue.approve, usage.read" in shown
    listed = _ok(tf, "users", "list").stdout
    row = next(line for line in listed.splitlines() if line.startswith("cli-alice"))
    assert row.split()[:4] == ["cli-alice", "lead", "queue.command", "enabled"]
    team = json.loads(_ok(tf, "teams", "show", "cli-ml", "--json").stdout)
    assert team["members"] == [{"user": "cli-alice", "default": True}]
    _ok(tf, "teams", "add-member", "cli-vision", "cli-alice", "--default")
    user = json.loads(_ok(tf, "users", "show", "cli-alice", "--json").stdout)
    assert user["default_team"] == "cli-vision"
    removed = _ok(tf, "teams", "remove-member", "cli-vision", "cli-alice")
    assert removed.stdout.strip() == "Removed cli-alice from team cli-vision."
    assert "cli-vision" in _ok(tf, "teams", "list").stdout


def test_set_role_disable_and_enable(tf: Invoke) -> None:
    _ok(tf, "users", "create", "cli-bob", "--grant", "queue.local")
    token = json.loads(_ok(tf, "tokens", "create", "bob-laptop", "--user", "cli-bob",
                           "--json").stdout)["token"]  # fmt: skip
    mine = json.loads(_ok(tf, "tokens", "whoami", "--json", token=token).stdout)
    assert (mine["user"], mine["permissions"]) == ("cli-bob", ["queue.submit", "queue.local"])
    _ok(tf, "users", "set-role", "cli-bob", "viewer")
    mine = json.loads(_ok(tf, "tokens", "whoami", "--json", token=token).stdout)
    assert mine["permissions"] == ["queue.local"]  # the grant is kept
    _ok(tf, "users", "set-role", "cli-bob", "viewer", "--no-grants")
    assert (
        json.loads(_ok(tf, "tokens", "whoami", "--json", token=token).stdout)["permissions"] == []
    )
    disabled = _ok(tf, "users", "disable", "cli-bob")
    assert disabled.stdout.splitlines()[0] == (
        "Disabled user cli-bob; their tokens now get HTTP 401."
    )
    refused = tf("tokens", "whoami", token=token)
    assert refused.exit_code == 4 and "cli-bob, who is disabled" in refused.stderr
    _ok(tf, "users", "enable", "cli-bob")
    _ok(tf, "tokens", "whoami", token=token)


def test_bad_input_is_refused_with_what_to_do(tf: Invoke) -> None:
    unknown = tf("users", "show", "cli-ghost")
    assert unknown.exit_code == 1 and "unknown user: cli-ghost" in unknown.stderr
    no_team = tf("users", "create", "cli-carl", "--team", "cli-nope")
    assert no_team.exit_code == 1 and "unknown team: cli-nope" in no_team.stderr
    last = tf("users", "disable", "admin")
    assert last.exit_code == 1 and "last enabled admin" in last.stderr
    bad_role = tf("users", "set-role", "admin", "root")
    assert bad_role.exit_code == 2
    _ok(tf, "users", "create", "cli-dora", "--role", "researcher")
    above = tf("tokens", "create", "t", "--user", "cli-dora", "-p", "audit.read")
    assert above.exit_code == 4  # refused for a permission, as every 403 is
    assert above.stderr.strip() == (
        "Error: Permission denied: user cli-dora's role researcher does not include "
        "audit.read; ask for fewer permissions or change the role (HTTP 403)"
    )


def test_jobs_list_filters_by_user_and_team(tf: Invoke) -> None:
    _ok(tf, "teams", "create", "cli-nlp")
    _ok(tf, "users", "create", "cli-erin", "--team", "cli-nlp")
    token = json.loads(_ok(tf, "tokens", "create", "erin", "--user", "cli-erin",
                           "--json").stdout)["token"]  # fmt: skip
    body = ("jobs", "submit", "quick", "--target", "worker", "--label", "pool=nowhere", "--json")
    job_id = json.loads(_ok(tf, *body, token=token).stdout)["job_id"]
    by_user = json.loads(_ok(tf, "jobs", "list", "--user", "cli-erin", "--json").stdout)
    assert [j["job_id"] for j in by_user["jobs"]] == [job_id]
    assert (by_user["jobs"][0]["user"], by_user["jobs"][0]["team"]) == ("cli-erin", "cli-nlp")
    by_team = _ok(tf, "jobs", "list", "--team", "cli-nlp").stdout
    assert job_id in by_team and "cli-erin/cli-nlp" in by_team
    shown = _ok(tf, "jobs", "show", job_id).stdout
    assert "cli-erin (team cli-nlp)" in shown
    # Erin sees her own; the admin's jobs are not hers to see.
    hers = json.loads(_ok(tf, "jobs", "list", "--json", token=token).stdout)
    assert {j["user"] for j in hers["jobs"]} == {"cli-erin"}
    _ok(tf, "jobs", "cancel", job_id, token=token)


def _signs_in(tf_url: str, name: str, password: str) -> int:
    body = json.dumps({"username": name, "password": password}).encode()
    request = urllib.request.Request(
        f"{tf_url}/api/auth/login", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_passwd_prompts_twice_or_reads_stdin_and_the_user_signs_in(
    tf: Invoke, orchestrator: Orchestrator
) -> None:
    _ok(tf, "users", "create", "cli-gwen")
    assert _signs_in(orchestrator.url, "cli-gwen", "gwen's passphrase") == 401  # none yet
    prompted = tf("users", "passwd", "cli-gwen", input="gwen's passphrase\ngwen's passphrase\n")
    assert prompted.exit_code == 0, prompted.output
    assert "Set the password of cli-gwen" in prompted.stdout
    assert "gwen's passphrase" not in prompted.stdout  # typed hidden, never echoed
    assert _signs_in(orchestrator.url, "cli-gwen", "gwen's passphrase") == 200
    piped = _ok(tf, "users", "passwd", "cli-gwen", "--password-stdin", "--json",
                input="a second passphrase\n")  # fmt: skip
    assert json.loads(piped.stdout)["name"] == "cli-gwen"
    assert _signs_in(orchestrator.url, "cli-gwen", "gwen's passphrase") == 401
    assert _signs_in(orchestrator.url, "cli-gwen", "a second passphrase") == 200


def test_passwd_refuses_mismatches_short_passwords_and_unknown_users(tf: Invoke) -> None:
    _ok(tf, "users", "create", "cli-finn")
    mismatch = tf("users", "passwd", "cli-finn", input="first passphrase\nsecond passphrase\n")
    assert mismatch.exit_code != 0
    short = tf("users", "passwd", "cli-finn", "--password-stdin", input="short\n")
    assert short.exit_code == 1 and "at least 10 characters" in short.stderr
    empty = tf("users", "passwd", "cli-finn", "--password-stdin", input="\n")
    assert empty.exit_code == 2 and "empty line" in empty.stderr
    unknown = tf("users", "passwd", "cli-ghost", "--password-stdin", input="long passphrase\n")
    assert unknown.exit_code == 1 and "unknown user: cli-ghost" in unknown.stderr
