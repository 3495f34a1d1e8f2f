"""`bench abuse` at a tiny scale, so it cannot rot: every attack of issue 23 runs for a
second or two against a real orchestrator process and prints its rows. Numbers are not
checked (tests time nothing); that each attack happened and was measured is."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench import fleet_common  # noqa: E402
from bench.__main__ import check_rows  # noqa: E402
from bench.abuse import Settings, main, run_abuse  # noqa: E402
from bench.abuse_attacks import ATTACKS  # noqa: E402
from bench.orchestrator_proc import Orchestrator  # noqa: E402

EVERY_ATTACK_ROW = (
    "attacker rate",
    "disk growth",
    "RSS growth",
    "server CPU",
    "heartbeat p50",
    "heartbeat p99",
    "API GET p50",
    "API GET p99",
    "probe answers not 200",
)


@pytest.mark.e2e
def test_every_attack_runs_and_prints_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(fleet_common, "RESULTS_DIR", tmp_path)
    tiny = dataclasses.replace(
        Settings(), seconds=1.5, connections=100, log_flood_bytes=32 * 1024**2,
        progress_reports=20, csv_history_reports=20,
    )  # fmt: skip
    rows = run_abuse(tiny)
    check_rows("abuse", rows)
    names = {r["name"]: r for r in rows}

    assert names["baseline: probe answers not 200"]["value"] == 0
    assert names["baseline: heartbeat p99"]["value"] > 0
    for letter, name, _, _ in ATTACKS:
        prefix = f"{letter} {name}"
        for what in EVERY_ATTACK_ROW:
            assert f"{prefix}: {what}" in names, f"{prefix}: {what}"
        assert names[f"{prefix}: attacker rate"]["value"] > 0, prefix
        # The probe measured beside the attack: latencies, not NaN from no samples.
        assert names[f"{prefix}: heartbeat p50"]["value"] > 0, prefix
        assert names[f"{prefix}: API GET p50"]["value"] > 0, prefix
    assert names["b progress flood: bytes to 20 /api/events readers"]["value"] > 0
    assert names["c metrics CSV loop: CSV columns"]["value"] > 3  # attempt, step, at + metrics
    # A full disk needs a tmpfs (root): either its rows, or a line saying why not.
    if "g disk full: skipped" in names:
        assert "g disk full: skipped: " in capsys.readouterr().out
    else:
        assert "g disk full: API GET on the full disk, failed" in names
        assert "g disk full: free space left" in names
    assert (tmp_path / "abuse-raw.json").exists()


def test_the_command_line_refuses_an_unknown_attack(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--only", "az"])
    assert exit_info.value.code == 2
    assert "--only letters from abcdefg" in capsys.readouterr().err


@pytest.mark.e2e
def test_the_orchestrator_runs_at_the_open_file_limit_it_is_given(tmp_path: Path) -> None:
    """Attack f reproduces issue 23 at a common default soft limit of 1,024 files."""
    server = Orchestrator(tmp_path / "server", open_file_limit=1000).start(timeout_s=30)
    try:
        limits = Path(f"/proc/{server.pid}/limits").read_text().splitlines()
    finally:
        server.stop()
    open_files = next(line for line in limits if line.startswith("Max open files"))
    assert open_files.split()[3] == "1000"
