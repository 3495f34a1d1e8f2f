"""The benchmark runner (bench/__main__.py): selection, row checks, output, failures."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[types.ModuleType]:
    """bench/__main__.py with two fake benchmarks; main() quiets structlog globally,
    so the configuration is put back afterwards for the other tests."""
    saved_config = structlog.get_config()
    monkeypatch.syspath_prepend(str(REPO_ROOT))
    import bench.__main__ as runner_module

    monkeypatch.setattr(runner_module, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(runner_module, "BENCHMARKS", ("fake_good", "fake_broken"))
    good = types.ModuleType("bench.fake_good")
    good.run = lambda: [  # type: ignore[attr-defined]
        {"name": "speed", "value": 123_456.7, "unit": "msg/s", "target": "> 1", "note": "n"},
        {"name": "size", "value": 0.5, "unit": "B", "target": None, "note": ""},
    ]
    broken = types.ModuleType("bench.fake_broken")
    broken.run = lambda: [{"name": "speed"}]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bench.fake_good", good)
    monkeypatch.setitem(sys.modules, "bench.fake_broken", broken)
    yield runner_module
    structlog.configure(**saved_config)


def test_runs_named_benchmark_prints_table_and_writes_json(
    runner: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert runner.main(["fake_good"]) == 0
    out = capsys.readouterr().out
    assert "== fake_good ==" in out
    assert "123,457  msg/s" in out
    assert "0.5" in out
    record = json.loads((tmp_path / "fake_good.json").read_text())
    assert record["benchmark"] == "fake_good"
    assert [row["name"] for row in record["rows"]] == ["speed", "size"]
    assert not (tmp_path / "fake_broken.json").exists()


def test_a_broken_benchmark_is_reported_and_the_others_still_run(
    runner: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert runner.main([]) == 1
    captured = capsys.readouterr()
    assert "exactly the keys" in captured.err
    assert "failed: fake_broken" in captured.err
    assert (tmp_path / "fake_good.json").exists()


def test_unknown_names_are_refused_with_the_known_ones(
    runner: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        runner.main(["nope"])
    assert exit_info.value.code == 2
    assert "unknown benchmark nope; known: fake_good, fake_broken" in capsys.readouterr().err


def test_run_must_return_a_list(runner: Any) -> None:
    with pytest.raises(TypeError, match="must return a list"):
        runner.check_rows("x", {"name": "speed"})


def test_list_prints_the_registry(runner: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--list"]) == 0
    assert capsys.readouterr().out.split() == ["fake_good", "fake_broken"]


def test_the_real_registry_names_existing_modules() -> None:
    sys.path.insert(0, str(REPO_ROOT))
    try:
        import bench.__main__ as runner_module
    finally:
        sys.path.remove(str(REPO_ROOT))
    for name in runner_module.BENCHMARKS:
        assert (REPO_ROOT / "bench" / f"{name}.py").is_file(), name
