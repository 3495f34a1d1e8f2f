"""`tunefleet server`'s local runner modes: one at a time, each reaching the plan."""

from __future__ import annotations

from click.testing import CliRunner

from tunefleet.actors.local_isolation import LocalMode
from tunefleet.cli.server import server
from tunefleet.http.app import ServerOptions
from tunefleet.http.local_setup import local_mode


def test_unisolated_and_isolated_only_together_is_a_usage_error() -> None:
    result = CliRunner().invoke(
        server, ["--local-runner-unisolated", "--local-runner-isolated-only"]
    )
    assert result.exit_code == 2
    assert (
        "--local-runner-unisolated and --local-runner-isolated-only contradict each other; "
        "pass one of them"
    ) in result.output


def test_each_flag_names_its_mode() -> None:
    assert local_mode(ServerOptions()) is LocalMode.PER_SUBMITTER
    assert local_mode(ServerOptions(local_runner_unisolated=True)) is LocalMode.UNISOLATED
    assert local_mode(ServerOptions(local_runner_isolated_only=True)) is LocalMode.ISOLATED_ONLY
