"""`tunefleet queue concurrency|me` and `tunefleet teams set-limits` against a real
orchestrator (shared by the session: the fleet's limits are put back as they were)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
Invoke = Callable[..., Result]


def _ok(tf: Invoke, *args: str) -> Result:
    result = tf(*args)
    assert result.exit_code == 0, result.output
    return result


def test_queue_concurrency_shows_and_sets_the_fleets_limits(tf: Invoke) -> None:
    try:
        set_ = _ok(tf, "queue", "concurrency", "--max-concurrent", "7", "--json")
        assert json.loads(set_.stdout)["max_concurrent"] == 7
        shown = _ok(tf, "queue", "concurrency").stdout
        assert "max_concurrent" in shown and "7" in shown
        assert "user_max_concurrent" in shown and "unlimited" in shown
    finally:
        _ok(tf, "queue", "concurrency", "--max-concurrent", "0", "--user-max-concurrent", "0")
    assert json.loads(_ok(tf, "queue", "concurrency", "--json").stdout)["max_concurrent"] is None


def test_a_negative_limit_is_refused_by_the_cli(tf: Invoke) -> None:
    result = tf("queue", "concurrency", "--max-concurrent", "-1")
    assert result.exit_code == 2
    assert "-1" in result.output


def test_teams_set_limits_warns_above_the_fleet_and_needs_a_limit(tf: Invoke) -> None:
    _ok(tf, "teams", "create", "cli-limited")
    done = _ok(tf, "teams", "set-limits", "cli-limited", "--max-jobs", "3", "--max-gpus", "4096")
    assert done.stdout.strip() == "Team cli-limited: max jobs 3, max GPUs 4096."
    assert "Warning: team cli-limited may run 4096 GPUs" in done.stderr
    kept = json.loads(_ok(tf, "teams", "set-limits", "cli-limited", "--max-gpus", "0",
                          "--json").stdout)  # fmt: skip
    assert (kept["max_jobs"], kept["max_gpus"], kept["warning"]) == (3, None, None)
    assert tf("teams", "set-limits", "cli-limited").exit_code == 2
    missing = tf("teams", "set-limits", "cli-no-such-team", "--max-jobs", "1")
    assert missing.exit_code != 0 and "cli-no-such-team" in missing.output


def test_queue_me_says_where_the_callers_jobs_stand(tf: Invoke) -> None:
    mine = json.loads(_ok(tf, "queue", "me", "--json").stdout)
    assert set(mine) >= {"pending_count", "running_count", "best_position", "awaiting_approval"}
    assert "Best position" in _ok(tf, "queue", "me").stdout
