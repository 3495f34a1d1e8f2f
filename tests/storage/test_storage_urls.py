"""Database URLs: what each form opens, and the one-line errors for bad ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tunefleet.errors import TunefleetError
from tunefleet.storage.database import open_database
from tunefleet.storage.errors import DatabaseUnavailable, DatabaseUrlError
from tunefleet.storage.urls import parse_database_url

DATA = Path("/srv/tunefleet")


@pytest.mark.parametrize("url", [None, "", "sqlite://", "sqlite:///"])
def test_no_url_means_sqlite_file_in_data_dir(url: str | None) -> None:
    config = parse_database_url(url, DATA)
    assert config.backend == "sqlite"
    assert config.sqlite_path == "/srv/tunefleet/tunefleet.db"
    assert config.description == "sqlite:///srv/tunefleet/tunefleet.db"


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///var/lib/tf.db", "/var/lib/tf.db"),
        ("sqlite:////var/lib/tf.db", "//var/lib/tf.db"),
        ("sqlite://mine.db", "/srv/tunefleet/mine.db"),
        ("sqlite:///:memory:", ":memory:"),
        ("SQLITE:///a%20b.db", "/a b.db"),
    ],
)
def test_sqlite_url_forms(url: str, path: str) -> None:
    config = parse_database_url(url, DATA)
    assert (config.backend, config.sqlite_path) == ("sqlite", path)


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_postgres_url_gives_connection_parameters(scheme: str) -> None:
    config = parse_database_url(
        f"{scheme}://tf:s%40cret@db.internal:6543/fleet?sslmode=require", DATA
    )
    assert config.backend == "postgresql"
    assert config.pg_database == "fleet"
    params = config.pg_params
    assert (params["host"], params["port"], params["user"]) == ("db.internal", 6543, "tf")
    assert params["password"] == "s@cret"
    assert params["sslmode"] == "require"
    assert "cret" not in config.description
    assert config.description == "postgresql://tf@db.internal:6543/fleet"


def test_postgres_defaults_host_and_port() -> None:
    config = parse_database_url("postgresql:///fleet", DATA)
    assert (config.pg_params["host"], config.pg_params["port"]) == ("localhost", 5432)
    assert "user" not in config.pg_params


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mysql://root@localhost/tf", "unsupported database URL scheme 'mysql'"),
        ("/var/lib/tf.db", "has no scheme"),
        ("postgresql://tf@localhost:5432/", "names no database"),
        ("postgresql://tf@localhost:port/fleet", "invalid port"),
    ],
)
def test_bad_urls_say_what_to_fix(url: str, expected: str) -> None:
    with pytest.raises(DatabaseUrlError) as caught:
        parse_database_url(url, DATA)
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message
    assert isinstance(caught.value, TunefleetError)


def test_password_never_appears_in_url_errors() -> None:
    with pytest.raises(DatabaseUrlError) as caught:
        parse_database_url("mysql://root:hunter2@localhost/tf", DATA)
    assert "hunter2" not in str(caught.value)
    assert "root:***@localhost" in str(caught.value)


async def test_open_with_unknown_scheme_is_a_tunefleet_error(tmp_path: Path) -> None:
    with pytest.raises(
        TunefleetError, match=re.escape("use sqlite:///path/to/file.db or postgresql://")
    ):
        await open_database("oracle://x@y/z", tmp_path)


async def test_unreachable_postgres_is_one_clear_line(tmp_path: Path) -> None:
    # Port 1 on loopback: nothing listens, the refusal is immediate.
    with pytest.raises(DatabaseUnavailable) as caught:
        await open_database("postgresql://postgres@127.0.0.1:1/test", tmp_path)
    message = str(caught.value)
    assert message.startswith("cannot use PostgreSQL at postgresql://postgres@127.0.0.1:1/test: ")
    assert "check --database-url" in message
    assert "\n" not in message


async def test_sqlite_under_a_file_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(DatabaseUnavailable, match=r"cannot open SQLite database .*not-a-dir"):
        await open_database(None, blocker / "data")


async def test_sqlite_file_that_is_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "tunefleet.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(DatabaseUnavailable, match="file is not a database"):
        await open_database(None, tmp_path)
