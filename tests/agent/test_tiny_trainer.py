"""The example trainer really trains, keeps the job contract, and its sample configs run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from executor_testkit import Recorder, executor, spec

from tunefleet.examples.tiny_trainer import Settings

ROOT = Path(__file__).resolve().parents[2]
TRAINER = [sys.executable, "-m", "tunefleet.examples.tiny_trainer"]


def write_config(tmp_path: Path, **config: Any) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"step_seconds": 0, **config}))
    return path


def train(tmp_path: Path, config_path: Path | None, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "CONFIG_PATH"}
    environ["TUNEFLEET_PROGRESS_FILE"] = str(tmp_path / "progress.jsonl")
    if config_path is not None:
        environ["CONFIG_PATH"] = str(config_path)
    environ.update(env)
    return subprocess.run(
        TRAINER, cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=60
    )


def progress_lines(tmp_path: Path) -> list[dict[str, Any]]:
    text = (tmp_path / "progress.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_loss_falls_and_the_fit_finds_the_line(tmp_path: Path) -> None:
    done = train(tmp_path, write_config(tmp_path, max_train_steps=300))
    assert done.returncode == 0, done.stderr
    lines = progress_lines(tmp_path)
    assert [p["step"] for p in lines] == list(range(1, 301))
    assert set(lines[0]) == {"step", "total", "loss", "lr", "epoch"}
    assert lines[0]["total"] == 300
    first = sum(p["loss"] for p in lines[:10]) / 10
    last = sum(p["loss"] for p in lines[-10:]) / 10
    assert last < first / 20
    final = json.loads((tmp_path / "output" / "model.json").read_text())
    assert final == json.loads((tmp_path / "output" / "checkpoint-300" / "state.json").read_text())
    assert final["step"] == 300
    assert final["weights"]["weight"] == pytest.approx(3.0, abs=0.1)
    assert final["weights"]["bias"] == pytest.approx(-1.0, abs=0.1)
    assert "step 300/300" in done.stdout


def test_checkpoints_every_n_steps_and_at_the_end(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_train_steps=25, checkpointing_steps=10, output_dir="ck")
    assert train(tmp_path, config).returncode == 0
    names = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert names == ["checkpoint-10", "checkpoint-20", "checkpoint-25", "model.json"]
    assert sorted(p.name for p in (tmp_path / "ck" / "checkpoint-10").iterdir()) == ["state.json"]


def test_checkpoint_bytes_pads_each_checkpoint(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_train_steps=4, checkpointing_steps=2, checkpoint_bytes=3000)
    assert train(tmp_path, config).returncode == 0
    padding = tmp_path / "output" / "checkpoint-2" / "padding.bin"
    assert padding.stat().st_size == 3000


def test_fail_at_step_exits_3_with_a_message(tmp_path: Path) -> None:
    done = train(tmp_path, write_config(tmp_path, max_train_steps=50, fail_at_step=5))
    assert done.returncode == 3
    assert "injected failure at step 5" in done.stderr
    assert [p["step"] for p in progress_lines(tmp_path)] == [1, 2, 3, 4]


def test_dashed_simpletuner_keys_and_a_config_directory_work(tmp_path: Path) -> None:
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(
        json.dumps({"--max_train_steps": 7, "--step_seconds": 0, "--output_dir": "out"})
    )
    assert train(tmp_path, tmp_path / "cfg").returncode == 0
    assert (tmp_path / "out" / "checkpoint-7" / "state.json").exists()


def test_resume_from_latest_checkpoint(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_train_steps=10, checkpointing_steps=5)
    assert train(tmp_path, config).returncode == 0
    config = write_config(
        tmp_path, max_train_steps=15, checkpointing_steps=5, resume_from_checkpoint="latest"
    )
    (tmp_path / "progress.jsonl").unlink()
    done = train(tmp_path, config)
    assert done.returncode == 0
    assert "resumed from" in done.stdout
    assert [p["step"] for p in progress_lines(tmp_path)] == [11, 12, 13, 14, 15]


def test_resume_skips_a_checkpoint_left_half_written(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_train_steps=10, checkpointing_steps=5)
    assert train(tmp_path, config).returncode == 0
    (tmp_path / "output" / "checkpoint-12").mkdir()  # no state.json: not complete
    config = write_config(tmp_path, max_train_steps=12, resume_from_checkpoint="latest")
    done = train(tmp_path, config)
    assert "at step 10" in done.stdout


def test_ledger_gets_one_line_per_success(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    config = write_config(tmp_path, max_train_steps=3, ledger_path=str(ledger))
    train(tmp_path, config, TUNEFLEET_JOB_ID="j_9", TUNEFLEET_ATTEMPT="2")
    failing = write_config(tmp_path, max_train_steps=3, fail_at_step=2, ledger_path=str(ledger))
    train(tmp_path, failing, TUNEFLEET_JOB_ID="j_10", TUNEFLEET_ATTEMPT="1")
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(e["job_id"], e["attempt"]) for e in entries] == [("j_9", "2")]
    assert isinstance(entries[0]["finished_at"], float)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (None, "no config: set CONFIG_PATH"),
        ("{not json", "cannot read config"),
        ("[1, 2]", "must be a JSON object"),
        ('{"max_train_steps": 0}', "must be at least 1"),
        ('{"learning_rate": "fast"}', "could not convert"),
    ],
)
def test_bad_config_exits_2_and_says_why(tmp_path: Path, config: str | None, message: str) -> None:
    path = None
    if config is not None:
        path = tmp_path / "config.json"
        path.write_text(config)
    done = train(tmp_path, path)
    assert done.returncode == 2
    assert message in done.stderr


def test_sigterm_saves_a_checkpoint_and_exits_143(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_train_steps=100_000, step_seconds=0.01)
    environ = {**os.environ, "CONFIG_PATH": str(config)}
    environ["TUNEFLEET_PROGRESS_FILE"] = str(tmp_path / "progress.jsonl")
    proc = subprocess.Popen(TRAINER, cwd=tmp_path, env=environ, stdout=subprocess.PIPE, text=True)
    try:
        progress = tmp_path / "progress.jsonl"
        for _ in range(1000):  # until training is under way, at most 10 s
            if progress.exists() and progress.read_text():
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 143
    saved = list((tmp_path / "output").glob("checkpoint-*"))
    assert len(saved) == 1
    step = json.loads((saved[0] / "state.json").read_text())["step"]
    assert 1 <= step < 100_000
    assert f"SIGTERM at step {step}" in out


async def test_quick_sample_config_runs_under_the_executor(tmp_path: Path) -> None:
    config = json.loads((ROOT / "configs" / "tiny-quick" / "config.json").read_text())
    command = config.pop("tunefleet_command")
    assert command == ["python", "-m", "tunefleet.examples.tiny_trainer"]
    rec = Recorder()
    outcome = await executor(tmp_path).run(spec(command, config=config), rec)
    assert outcome.status == "completed", outcome
    assert rec.progress[-1]["step"] == 20
    assert rec.progress[-1]["percent"] == 100.0
    job_dir = tmp_path / "jobs" / "j_1" / "attempt-1"
    assert (job_dir / "output" / "checkpoint-20" / "state.json").exists()


async def test_failing_sample_config_fails_with_the_trainers_message(tmp_path: Path) -> None:
    config = json.loads((ROOT / "configs" / "tiny-fail.json").read_text())
    command = config.pop("tunefleet_command")
    outcome = await executor(tmp_path).run(spec(command, config=config), Recorder())
    assert outcome.status == "failed"
    assert outcome.exit_code == 3
    assert outcome.error == "exit code 3: error: injected failure at step 5 (fail_at_step)"


async def test_ignore_sigterm_makes_the_executor_use_sigkill(tmp_path: Path) -> None:
    config = {"max_train_steps": 100_000, "step_seconds": 0.01, "ignore_sigterm": True}
    rec = Recorder()
    ex = executor(tmp_path, grace_s=0.3)
    run = asyncio.create_task(ex.run(spec(TRAINER, config=config), rec))
    await rec.wait_until(lambda: bool(rec.progress))
    await ex.cancel("test")
    outcome = await asyncio.wait_for(run, timeout=10)
    assert (outcome.status, outcome.exit_code) == ("cancelled", -signal.SIGKILL)


def test_every_sample_config_is_valid_for_the_trainer() -> None:
    paths = [*ROOT.glob("configs/tiny-*/config.json"), ROOT / "configs" / "tiny-fail.json"]
    assert len(paths) == 3
    expected = {"tiny-example": (200, 0.05), "tiny-quick": (20, 0.02), "tiny-fail": (20, 0.02)}
    for path in paths:
        config = json.loads(path.read_text())
        assert config["tunefleet_command"] == ["python", "-m", "tunefleet.examples.tiny_trainer"]
        settings = Settings.from_config(config)
        name = path.parent.name if path.name == "config.json" else path.stem
        assert (settings.max_train_steps, settings.step_seconds) == expected[name]
    assert Settings.from_config(json.loads(paths[-1].read_text())).fail_at_step == 5
