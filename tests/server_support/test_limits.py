"""The bounds' table: sizes and the free-disk floor read as an operator writes them."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tunefleet.cli.server import server
from tunefleet.http.app import ServerOptions
from tunefleet.limits import BadLimit, FreeDiskFloor, GiB, Limits, MiB, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4096", 4096), ("256MiB", 256 * MiB), ("1GiB", GiB), ("1gb", 10**9), ("1.5KiB", 1536)],
)
def test_a_size_reads_with_or_without_a_unit(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-1", "5 parsecs"])
def test_a_size_that_is_not_one_is_refused_saying_how_to_write_it(text: str) -> None:
    with pytest.raises(BadLimit, match="not a size"):
        parse_size(text)


def test_the_default_floor_is_the_smaller_of_a_gibibyte_and_five_percent() -> None:
    floor = FreeDiskFloor.parse("1GiB,5%")
    assert floor.floor_for(1000 * GiB) == GiB
    assert floor.floor_for(10 * GiB) == GiB // 2
    assert floor == FreeDiskFloor()


def test_a_floor_of_zero_is_off_and_refuses_nothing(tmp_path) -> None:
    floor = FreeDiskFloor.parse("0")
    assert floor.off
    below, _free, reserve = floor.free_below_floor(tmp_path)
    assert (below, reserve) == (False, 0)


@pytest.mark.parametrize("text", ["150%", "x%", ","])
def test_a_bad_floor_is_refused(text: str) -> None:
    with pytest.raises(BadLimit):
        FreeDiskFloor.parse(text)


def test_the_server_flags_fill_the_limits_and_nothing_else() -> None:
    ctx = server.make_context(
        "server", ["--max-log-bytes-per-attempt", "1MiB", "--min-free-disk", "2GiB"]
    )
    options = ServerOptions.from_cli(ctx.params)
    assert options.limits.max_log_bytes_per_attempt == MiB
    assert options.limits.min_free_disk == FreeDiskFloor(bytes=2 * GiB, percent=0.0)
    assert options.limits.max_body_bytes == Limits().max_body_bytes


def test_a_bad_size_flag_is_a_usage_error_naming_the_flag() -> None:
    result = CliRunner().invoke(server, ["--max-body-bytes", "huge"])
    assert result.exit_code == 2
    assert "--max-body-bytes" in result.output
    assert "not a size" in result.output
