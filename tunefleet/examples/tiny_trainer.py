"""A tiny real trainer that keeps tunefleet's job contract (docs/job-contract.md).

It fits y = 3x - 1 (plus a little noise) with minibatch SGD in pure Python, so a
fleet can be tried end to end on any machine, GPU or not:

    CONFIG_PATH=configs/tiny-quick/config.json python -m tunefleet.examples.tiny_trainer
    python -m tunefleet.examples.tiny_trainer --config configs/tiny-example/config.json

Config keys (SimpleTuner's names where one exists; `--name` spellings work too):
max_train_steps, learning_rate, train_batch_size, seed, output_dir,
checkpointing_steps, resume_from_checkpoint ("latest"), checkpoint_bytes, step_seconds,
log_every, fail_at_step, ignore_sigterm, ledger_path. Exit codes: 0 done, 2 bad config,
3 fail_at_step reached, 143 stopped by SIGTERM (after saving a checkpoint).

Checkpoints are directories, as SimpleTuner writes them: `output_dir/checkpoint-<step>/`
holding `state.json` (and `padding.bin` of `checkpoint_bytes`, to try large uploads).
Each is written under a temporary name and renamed, so a `checkpoint-<step>/` that can
be seen is complete. The final model is `output_dir/model.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

EXIT_BAD_CONFIG = 2
EXIT_INJECTED_FAILURE = 3
EXIT_SIGTERM = 143  # 128 + SIGTERM, what a shell reports
DATASET_SIZE = 512
STATE_FILE = "state.json"
MODEL_FILE = "model.json"
TRUE_WEIGHT, TRUE_BIAS, NOISE = 3.0, -1.0, 0.1


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Settings:
    max_train_steps: int = 100
    learning_rate: float = 0.05
    train_batch_size: int = 16
    seed: int = 42
    output_dir: str = "output"
    step_seconds: float = 0.05
    checkpointing_steps: int = 0
    log_every: int = 0  # 0: about twenty log lines per run
    resume_from_checkpoint: str | None = None
    fail_at_step: int | None = None
    ignore_sigterm: bool = False
    ledger_path: str | None = None
    checkpoint_bytes: int = 0

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Settings:
        known = cls.__dataclass_fields__
        values: dict[str, Any] = {}
        for raw_key, value in config.items():
            key = str(raw_key).removeprefix("--")
            if key in known and value is not None:
                values[key] = value
        try:
            settings = cls(**values)
            return settings._checked()
        except (TypeError, ValueError) as error:
            raise ConfigError(str(error)) from error

    def _checked(self) -> Settings:
        checked = Settings(
            max_train_steps=int(self.max_train_steps),
            learning_rate=float(self.learning_rate),
            train_batch_size=int(self.train_batch_size),
            seed=int(self.seed),
            output_dir=str(self.output_dir),
            step_seconds=float(self.step_seconds),
            checkpointing_steps=int(self.checkpointing_steps),
            log_every=int(self.log_every),
            resume_from_checkpoint=self.resume_from_checkpoint,
            fail_at_step=None if self.fail_at_step is None else int(self.fail_at_step),
            ignore_sigterm=bool(self.ignore_sigterm),
            ledger_path=self.ledger_path,
            checkpoint_bytes=int(self.checkpoint_bytes),
        )
        if checked.max_train_steps < 1 or checked.train_batch_size < 1:
            raise ConfigError("max_train_steps and train_batch_size must be at least 1")
        if checked.step_seconds < 0 or checked.learning_rate <= 0:
            raise ConfigError("step_seconds must be >= 0 and learning_rate > 0")
        return checked


def load_config(path_arg: str | None) -> dict[str, Any]:
    raw = path_arg or os.environ.get("CONFIG_PATH")
    if not raw:
        raise ConfigError("no config: set CONFIG_PATH or pass --config PATH")
    path = Path(raw)
    if path.is_dir():  # SimpleTuner accepts a config directory too
        path = path / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read config {path}: {error}") from error
    if not isinstance(config, dict):
        raise ConfigError(f"config {path} must be a JSON object")
    return config


class Model:
    """y = w * x + b, trained on mean squared error."""

    def __init__(self, weight: float = 0.0, bias: float = 0.0) -> None:
        self.weight = weight
        self.bias = bias

    def step(self, batch: list[tuple[float, float]], learning_rate: float) -> float:
        n = len(batch)
        errors = [(self.weight * x + self.bias) - y for x, y in batch]
        loss = sum(e * e for e in errors) / n
        grad_w = 2.0 * sum(e * x for e, (x, _) in zip(errors, batch, strict=True)) / n
        grad_b = 2.0 * sum(errors) / n
        self.weight -= learning_rate * grad_w
        self.bias -= learning_rate * grad_b
        return loss


def make_dataset(rng: random.Random) -> list[tuple[float, float]]:
    points = []
    for _ in range(DATASET_SIZE):
        x = rng.uniform(-1.0, 1.0)
        points.append((x, TRUE_WEIGHT * x + TRUE_BIAS + rng.gauss(0.0, NOISE)))
    return points


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(scratch, path)


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete `checkpoint-<step>/` directory (one with its state.json)."""
    found = []
    for path in output_dir.glob("checkpoint-*"):
        suffix = path.name.removeprefix("checkpoint-")
        if suffix.isdigit() and (path / STATE_FILE).is_file():
            found.append((int(suffix), path))
    return max(found)[1] if found else None


def write_padding(path: Path, size: int) -> None:
    """`size` bytes that stand for model weights (varied, so nothing compresses them away)."""
    block = random.Random(size).randbytes(min(size, 1024 * 1024))
    with path.open("wb") as handle:
        left = size
        while left > 0:
            handle.write(block[:left])
            left -= len(block)


class Trainer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.output_dir = Path(settings.output_dir)
        progress = os.environ.get("TUNEFLEET_PROGRESS_FILE")
        self.progress_path = Path(progress) if progress else None
        self.model = Model()
        self.step = 0
        self.loss = math.nan
        self.stop_requested = False

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested = True

    def state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "weights": {"weight": self.model.weight, "bias": self.model.bias},
            "loss": self.loss,
            "job_id": os.environ.get("TUNEFLEET_JOB_ID"),
        }

    def checkpoint(self) -> Path:
        """Write `checkpoint-<step>/` under a temporary name, then rename it into place."""
        self.output_dir.mkdir(parents=True, exist_ok=True)
        path = self.output_dir / f"checkpoint-{self.step}"
        scratch = self.output_dir / f".checkpoint-{self.step}.tmp"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        write_json_atomic(scratch / STATE_FILE, self.state())
        if self.settings.checkpoint_bytes > 0:
            write_padding(scratch / "padding.bin", self.settings.checkpoint_bytes)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(scratch, path)
        return path

    def resume(self) -> None:
        if self.settings.resume_from_checkpoint != "latest":
            return
        path = latest_checkpoint(self.output_dir)
        if path is None:
            print("no checkpoint to resume from; starting fresh", flush=True)
            return
        saved = json.loads((path / STATE_FILE).read_text())
        self.step = int(saved["step"])
        self.model = Model(saved["weights"]["weight"], saved["weights"]["bias"])
        print(f"resumed from {path} at step {self.step}", flush=True)

    def report(self, total: int, epoch: float) -> None:
        if self.progress_path is None:
            return
        line = {
            "step": self.step,
            "total": total,
            "loss": round(self.loss, 6),
            "lr": self.settings.learning_rate,
            "epoch": round(epoch, 3),
        }
        with self.progress_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")

    def run(self) -> int:
        s = self.settings
        rng = random.Random(s.seed)
        data = make_dataset(rng)
        self.resume()
        total = s.max_train_steps
        log_every = s.log_every or max(1, total // 20)
        print(
            f"training y = {TRUE_WEIGHT}x{TRUE_BIAS:+} for {total} steps, lr {s.learning_rate},"
            f" batch {s.train_batch_size}, seed {s.seed}",
            flush=True,
        )
        while self.step < total:
            if self.stop_requested:
                path = self.checkpoint()
                print(f"SIGTERM at step {self.step}: saved {path}, stopping", flush=True)
                return EXIT_SIGTERM
            if s.fail_at_step is not None and self.step + 1 >= s.fail_at_step:
                print(
                    f"error: injected failure at step {self.step + 1} (fail_at_step)",
                    file=sys.stderr,
                    flush=True,
                )
                return EXIT_INJECTED_FAILURE
            batch = rng.sample(data, min(s.train_batch_size, len(data)))
            self.loss = self.model.step(batch, s.learning_rate)
            self.step += 1
            self.report(total, self.step * s.train_batch_size / len(data))
            if self.step % log_every == 0 or self.step == total:
                print(
                    f"step {self.step}/{total} loss {self.loss:.6f} "
                    f"w {self.model.weight:.4f} b {self.model.bias:.4f}",
                    flush=True,
                )
            if s.checkpointing_steps and self.step % s.checkpointing_steps == 0:
                self.checkpoint()
            if s.step_seconds:
                time.sleep(s.step_seconds)
        path = self.checkpoint()
        write_json_atomic(self.output_dir / MODEL_FILE, self.state())
        print(f"done: w {self.model.weight:.4f} b {self.model.bias:.4f}, saved {path}", flush=True)
        self.record_in_ledger()
        return 0

    def record_in_ledger(self) -> None:
        """One line per successful run, so a chaos test can prove a job ran exactly once."""
        if not self.settings.ledger_path:
            return
        entry = {
            "job_id": os.environ.get("TUNEFLEET_JOB_ID"),
            "attempt": os.environ.get("TUNEFLEET_ATTEMPT"),
            "finished_at": time.time(),
        }
        # One O_APPEND write per line keeps concurrent writers from interleaving.
        fd = os.open(self.settings.ledger_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="tunefleet's tiny example trainer")
    parser.add_argument("--config", help="config JSON file or directory (default: $CONFIG_PATH)")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_config(load_config(args.config))
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return EXIT_BAD_CONFIG
    trainer = Trainer(settings)
    if settings.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, trainer.request_stop)
    return trainer.run()


if __name__ == "__main__":
    sys.exit(main())
