"""`tunefleet teams set-quota` and the quota columns of `teams list` against a real
orchestrator (issue 25)."""

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


def test_set_quota_sets_keeps_warns_and_clears(tf: Invoke) -> None:
    _ok(tf, "teams", "create", "cli-quota")
    done = _ok(
        tf, "teams", "set-quota", "cli-quota", "--gpus", "4096", "--flavor", "*B300*=2",
        "--weight", "2", "--borrow-limit", "1",
    )  # fmt: skip
    assert done.stdout.strip() == "Team cli-quota: quota 4096 GPUs; *B300*=2; weight 2; borrow ≤1."
    assert "'*B300*' matches no worker" in done.stderr
    assert "oversubscribed" in done.stderr
    kept = json.loads(_ok(tf, "teams", "set-quota", "cli-quota", "--unlimited-borrowing",
                          "--no-flavors", "--json").stdout)  # fmt: skip
    assert kept["quota"] == {"gpus": 4096, "flavors": {}, "weight": 2.0, "borrow_limit": None}
    listed = _ok(tf, "teams", "list").stdout
    assert "QUOTA" in listed and "STANDING" in listed and "4096 GPUs; weight 2" in listed
    shares = json.loads(_ok(tf, "teams", "list", "--json").stdout)["fair_share"]
    assert shares["cli-quota"]["used_gpus"] == 0
    cleared = _ok(tf, "teams", "set-quota", "cli-quota", "--clear").stdout
    assert cleared.strip() == "Team cli-quota: quota -."
    assert "cli-quota" not in json.loads(_ok(tf, "teams", "list", "--json").stdout)["fair_share"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--weight", "0"], "above 0"),
        (["--weight", "-1"], "above 0"),
        (["--gpus", "-1"], "-1"),
        (["--flavor", "A100"], "GLOB=GPUS"),
        (["--flavor", "*A100*=-2"], "GLOB=GPUS"),
        ([], "give --gpus"),
        (["--clear", "--gpus", "1"], "alone"),
    ],
)
def test_bad_quota_options_are_refused_before_any_request(
    tf: Invoke, args: list[str], said: str
) -> None:
    result = tf("teams", "set-quota", "cli-quota-bad", *args)
    assert result.exit_code == 2, result.output
    assert said in result.output


def test_a_quota_for_an_unknown_team_says_which(tf: Invoke) -> None:
    missing = tf("teams", "set-quota", "cli-no-such-team", "--gpus", "1")
    assert missing.exit_code != 0 and "cli-no-such-team" in missing.output
