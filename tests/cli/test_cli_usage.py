"""`tunefleet usage` and `tunefleet teams set-budget / budget / clear-budget` against a
real orchestrator (names unique per test: the orchestrator is shared by the session)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result

from tunefleet.cli.usage import usage_csv

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
Invoke = Callable[..., Result]


def _ok(tf: Invoke, *args: str) -> Result:
    result = tf(*args)
    assert result.exit_code == 0, result.output
    return result


def test_a_budget_is_set_shown_and_cleared(tf: Invoke) -> None:
    _ok(tf, "teams", "create", "cli-budget")
    made = _ok(tf, "teams", "set-budget", "cli-budget", "--gpu-hours", "2.5",
               "--period", "week", "--action", "block").stdout  # fmt: skip
    assert made.splitlines()[0] == "Set the budget of team cli-budget."
    assert "2.5 GPU-hours per week" in made and "block" in made
    shown = json.loads(_ok(tf, "teams", "budget", "cli-budget", "--json").stdout)
    budget = shown["budget"]
    assert (budget["gpu_hours"], budget["period"], budget["action"]) == (2.5, "week", "block")
    assert (budget["used_gpu_hours"], budget["spent"]) == (0, False)
    in_usage = json.loads(_ok(tf, "usage", "--json").stdout)["budgets"]
    assert "cli-budget" in [b["team"] for b in in_usage]
    assert "Budget of team cli-budget: 0.00 of 2.5 GPU-hours per week" in _ok(tf, "usage").stdout
    cleared = _ok(tf, "teams", "clear-budget", "cli-budget").stdout
    assert cleared.strip() == "Removed the budget of team cli-budget."
    assert _ok(tf, "teams", "budget", "cli-budget").stdout.strip() == (
        "Team cli-budget has no budget."
    )
    again = tf("teams", "clear-budget", "cli-budget")
    assert again.exit_code == 1 and "has no budget" in again.stderr
    bad = tf("teams", "set-budget", "cli-nope", "--gpu-hours", "1")
    assert bad.exit_code == 1 and "unknown team: cli-nope" in bad.stderr


def test_usage_of_an_empty_window_and_bad_windows(tf: Invoke) -> None:
    args = ("usage", "--by", "user", "--since", "2020-01-01", "--until", "2020-01-02")
    empty = _ok(tf, *args).stdout
    assert empty.strip().startswith("No GPU usage from 2020-01-01T00:00:00")
    data = json.loads(_ok(tf, *args, "--json").stdout)
    assert (data["by"], data["rows"], data["total_gpu_seconds"]) == ("user", [], 0)
    assert _ok(tf, *args, "--csv").stdout == "day,user,gpu_seconds,gpu_hours,attempts\n"
    backwards = tf("usage", "--since", "2020-01-02", "--until", "2020-01-01")
    assert backwards.exit_code == 1 and "must be before until" in backwards.stderr
    garbled = tf("usage", "--since", "last tuesday")
    assert garbled.exit_code == 1 and "since" in garbled.stderr


def test_usage_csv_escapes_cells_a_spreadsheet_would_run() -> None:
    data = {
        "by": "user",
        "rows": [
            {"day": "2026-11-01", "name": "=cmd()", "gpu_seconds": 7.5,
             "gpu_hours": 0.002083, "attempts": 1},
        ],
    }  # fmt: skip
    assert usage_csv(data) == (
        "day,user,gpu_seconds,gpu_hours,attempts\n2026-11-01,'=cmd(),7.5,0.002083,1\n"
    )
