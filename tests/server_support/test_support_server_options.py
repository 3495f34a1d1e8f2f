"""ServerOptions as the server keeps them: every path absolute from the start."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunefleet.http import keys
from tunefleet.http.app import ServerOptions, build_app


def test_the_app_keeps_relative_paths_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative path would be read from whatever directory a job later runs in."""
    monkeypatch.chdir(tmp_path)
    app = build_app(ServerOptions(data_dir=Path("data"), configs_dir=Path("configs")))
    kept = app[keys.OPTIONS]
    assert kept.data_dir == tmp_path / "data"
    assert kept.configs_dir == tmp_path / "configs"
