"""`tunefleet server --ping-interval`: what agents can accept, and where it goes."""

from __future__ import annotations

from click.testing import CliRunner

from tunefleet.cli.server import server
from tunefleet.http.app import ServerOptions


def test_a_ping_interval_longer_than_agents_wait_is_a_usage_error() -> None:
    # PROTOCOL.md: agents expect a ping at least every 30 s.
    result = CliRunner().invoke(server, ["--ping-interval", "31"])
    assert result.exit_code == 2
    assert "--ping-interval" in result.output and "1.0<=x<=30.0" in result.output


def test_the_ping_interval_reaches_the_fleet() -> None:
    assert ServerOptions(ping_interval=5.0).fleet_settings().ping_interval_s == 5.0
    assert ServerOptions().fleet_settings().ping_interval_s == 15.0
