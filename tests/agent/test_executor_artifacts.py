"""A job's outputs and checkpoints reach the store, and a retried attempt resumes from the
stored checkpoint: the real example trainer under the real executor, against a fake
store that speaks the contract."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from executor_testkit import Recorder, executor

from tests.fakes.artifact_store import TOKEN, FakeStore, manifest, start_fake_store
from tunefleet.agent.job_artifacts import ArtifactOptions
from tunefleet.agent.job_events import ArtifactPlan, JobSpec, JobStarted

TRAINER = [sys.executable, "-m", "tunefleet.examples.tiny_trainer"]
FAST = ArtifactOptions(poll_s=0.05, backoff_base_s=0.01, backoff_max_s=0.05)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[tuple[FakeStore, str]]:
    fake = FakeStore(tmp_path / "store")
    runner, endpoint = await start_fake_store(fake)
    yield fake, endpoint
    await runner.cleanup()


def job(endpoint: str, attempt: int = 1, resume: str | None = None, **config: Any) -> JobSpec:
    return JobSpec(
        job_id="j_1",
        attempt=attempt,
        config={"step_seconds": 0, **config},
        command=TRAINER,
        artifacts=ArtifactPlan(endpoint, TOKEN, resume),
    )


def progress_steps(tmp_path: Path, attempt: int) -> list[int]:
    path = tmp_path / "work" / "jobs" / "j_1" / f"attempt-{attempt}" / "progress.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


async def test_checkpoints_go_up_while_training_and_the_outputs_after(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    rec = Recorder()
    spec = job(endpoint, max_train_steps=30, checkpointing_steps=10, step_seconds=0.03)
    outcome = await executor(tmp_path / "work", artifacts=FAST).run(spec, rec)
    assert outcome.status == "completed", outcome
    keys = fake.stored_keys()
    assert "model.json" in keys
    assert "checkpoint-30/.tunefleet-manifest.json" in keys
    # At least one checkpoint went up while the trainer ran, each manifest after its files.
    stored_early = [k for k in keys if k.endswith("manifest.json") and "checkpoint-30" not in k]
    assert stored_early, keys
    puts = [path for method, path in fake.requests if method == "PUT"]
    for name in ("checkpoint-10", "checkpoint-20", "checkpoint-30"):
        mine = [i for i, p in enumerate(puts) if f"/{name}/" in p]
        if mine:
            assert puts[mine[-1]].endswith("/.tunefleet-manifest.json")
    last = manifest(fake, "checkpoint-30/.tunefleet-manifest.json")
    assert last["checkpoint"] == "checkpoint-30" and last["step"] == 30
    assert last["files"] == [
        {
            "key": "checkpoint-30/state.json",
            "size": fake.path("checkpoint-30/state.json").stat().st_size,
            "sha256": fake.sha256("checkpoint-30/state.json"),
        }
    ]
    # The outputs manifest goes up last and lists the files outside the checkpoints.
    assert puts[-1].split("/", 4)[4] == ".tunefleet-manifest.json", puts[-3:]
    outputs = manifest(fake, ".tunefleet-manifest.json")
    assert {e["key"]: e["sha256"] for e in outputs["files"]} == {
        k: fake.sha256(k) for k in keys if "/" not in k and not k.endswith("manifest.json")
    }
    assert "model.json" in {e["key"] for e in outputs["files"]}
    files = [k for k in keys if not k.endswith("manifest.json")]
    assert outcome.outputs == {
        "stored": True,
        "keys": len(files),
        "bytes": sum(fake.path(k).stat().st_size for k in files),
    }
    assert any("outputs stored" in line for line in rec.texts("stdout"))
    config = json.loads((tmp_path / "work/jobs/j_1/attempt-1/config.json").read_text())
    assert config["output_dir"] == "output"  # named for the trainer when the job names none


async def test_a_retried_attempt_resumes_from_the_stored_checkpoint(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    first = job(endpoint, max_train_steps=20, checkpointing_steps=10)
    assert (await executor(tmp_path / "work", artifacts=FAST).run(first, Recorder())).status == (
        "completed"
    )
    requests_before = len(fake.requests)
    rec = Recorder()
    second = job(
        endpoint, attempt=2, resume="checkpoint-20", max_train_steps=25, checkpointing_steps=10
    )
    outcome = await executor(tmp_path / "work", artifacts=FAST).run(second, rec)
    assert outcome.status == "completed", outcome
    assert progress_steps(tmp_path, 2) == [21, 22, 23, 24, 25]
    config = json.loads((tmp_path / "work/jobs/j_1/attempt-2/config.json").read_text())
    assert config["resume_from_checkpoint"] == "latest"
    # The start says what it resumed from: the agent's running report carries it.
    started = [e for e in rec.events if isinstance(e, JobStarted)]
    assert [e.resumed_from for e in started] == ["checkpoint-20"]
    assert any("restored checkpoint-20" in line for line in rec.texts("stdout"))
    later_puts = [p for m, p in fake.requests[requests_before:] if m == "PUT"]
    assert not any("/checkpoint-20/" in p for p in later_puts)  # restored: not sent back
    assert "checkpoint-25/.tunefleet-manifest.json" in fake.stored_keys()


async def test_resume_keeps_the_configs_dashed_spelling_and_its_dataloader(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    _, endpoint = store
    first = job(endpoint, max_train_steps=10, checkpointing_steps=5)
    await executor(tmp_path / "work", artifacts=FAST).run(first, Recorder())
    second = dataclasses.replace(
        job(endpoint, attempt=2, resume="checkpoint-10"),
        config={"--max_train_steps": 12, "--step_seconds": 0, "--output_dir": "output"},
        dataloader=[{"id": "ds"}],
    )
    outcome = await executor(tmp_path / "work", artifacts=FAST).run(second, Recorder())
    assert outcome.status == "completed", outcome
    config = json.loads((tmp_path / "work/jobs/j_1/attempt-2/config.json").read_text())
    assert config["--resume_from_checkpoint"] == "latest"
    assert config["--data_backend_config"].endswith("multidatabackend.json")
    assert progress_steps(tmp_path, 2) == [11, 12]


async def test_an_incomplete_stored_checkpoint_means_a_fresh_start(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    fake.path("checkpoint-5/state.json").parent.mkdir(parents=True)
    fake.path("checkpoint-5/state.json").write_text("{}")  # no manifest: never completed
    rec = Recorder()
    outcome = await executor(tmp_path / "work", artifacts=FAST).run(
        job(endpoint, resume="checkpoint-5", max_train_steps=3), rec
    )
    assert outcome.status == "completed"
    assert progress_steps(tmp_path, 1) == [1, 2, 3]
    assert any("incomplete" in line for line in rec.texts("stdout"))
    # A fresh start claims no resume (the timeline must not say "resumed from").
    assert [e.resumed_from for e in rec.events if isinstance(e, JobStarted)] == [None]


async def test_outputs_wait_out_a_store_outage_before_completed(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    fake.fail_next = 5
    outcome = await executor(tmp_path / "work", artifacts=FAST).run(
        job(endpoint, max_train_steps=3), Recorder()
    )
    assert outcome.status == "completed", outcome
    assert "model.json" in fake.stored_keys()


async def test_a_store_out_of_space_fails_the_job_and_says_so(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    fake.refuse_status = 507
    outcome = await executor(tmp_path / "work", artifacts=FAST).run(
        job(endpoint, max_train_steps=3), Recorder()
    )
    assert outcome.status == "failed"
    assert outcome.exit_code == 0
    assert outcome.error is not None and outcome.error.startswith("outputs not stored:")
    assert "507" in outcome.error and "no space" in outcome.error
    assert outcome.outputs == {"stored": False, "reason": outcome.error}


async def test_a_failed_trainer_still_stores_its_newest_checkpoint(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    outcome = await executor(tmp_path / "work", artifacts=FAST).run(
        job(endpoint, max_train_steps=50, checkpointing_steps=4, fail_at_step=10), Recorder()
    )
    assert outcome.status == "failed"
    assert outcome.error == "exit code 3: error: injected failure at step 10 (fail_at_step)"
    assert "checkpoint-8/.tunefleet-manifest.json" in fake.stored_keys()
    assert "model.json" not in fake.stored_keys()


async def test_a_cancel_while_outputs_are_stored_stops_the_upload(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    fake.fail_next = 10_000  # the store never comes back
    ex = executor(tmp_path / "work", artifacts=FAST)
    run = asyncio.create_task(ex.run(job(endpoint, max_train_steps=2), Recorder()))
    for _ in range(500):
        await asyncio.sleep(0.01)
        if len(fake.requests) > 3:
            break
    await ex.cancel("cancelled by the user")
    outcome = await asyncio.wait_for(run, 10)
    assert outcome.status == "cancelled"
    assert outcome.error == "cancelled by the user"


async def test_a_cancelled_trainers_sigterm_checkpoint_is_stored_for_its_retry(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    ex = executor(tmp_path / "work", artifacts=FAST)
    rec = Recorder()
    run = asyncio.create_task(
        ex.run(job(endpoint, max_train_steps=100_000, step_seconds=0.01), rec)
    )
    await rec.wait_until(lambda: bool(rec.progress))
    await ex.cancel("worker agent stopped by SIGTERM")
    outcome = await asyncio.wait_for(run, 20)
    assert outcome.status == "cancelled"
    manifests = [k for k in fake.stored_keys() if k.endswith(".tunefleet-manifest.json")]
    assert len(manifests) == 1, fake.stored_keys()
    assert "model.json" not in fake.stored_keys()
