"""The local runner with the real executor and the tiny trainer, on the real clock: a
`target: local` job runs in a real process on the orchestrator, and its progress and
logs are stored like a remote agent's."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from orchestrator_testkit import FleetHarness, eventually, job_record

from tunefleet.actors.clock import RealClock
from tunefleet.actors.context import FleetSettings
from tunefleet.actors.fleet import LOCAL_WORKER_ID
from tunefleet.actors.local_runner import LocalRunner, local_worker_record
from tunefleet.actors.stream import StreamEvent
from tunefleet.agent.executor import JobExecutor
from tunefleet.agent.gpu import GpuDevice, GpuInventory
from tunefleet.agent.job_submit import job_spec
from tunefleet.limits import Limits
from tunefleet.protocol.events import JobRequirements, JobSubmitEvent

pytestmark = pytest.mark.timeout(60)

TRAINER = [sys.executable, "-m", "tunefleet.examples.tiny_trainer"]


@dataclass
class LocalFleet:
    harness: FleetHarness
    runner: LocalRunner

    async def submit(self, target: str, config: dict[str, Any]) -> str:
        rec = job_record(target=target, gpu_count=0, config=config)
        reply = await self.harness.fleet.submit(rec, actor="tester")
        return str(reply["job_id"])

    async def wait_until_ended(self, job_id: str) -> None:
        await eventually(
            lambda: self.harness.job_actor(job_id) is None, f"job {job_id} to end", timeout_s=40
        )


@pytest.fixture
def settings() -> FleetSettings:
    return FleetSettings()


@pytest.fixture
async def local(tmp_path: Path, settings: FleetSettings) -> AsyncIterator[LocalFleet]:
    clock = RealClock()
    inventory = GpuInventory()  # no GPU here: the job asks for none
    harness = await FleetHarness.open(
        tmp_path / "data",
        clock,
        settings,
        local_worker=local_worker_record(inventory, clock.time()),
        storage="memory",
    )
    executor = JobExecutor(
        tmp_path / "local-runner", TRAINER, grace_s=5.0, log_interval_s=0.05, progress_poll_s=0.05
    )
    runner = LocalRunner(harness.fleet, executor, inventory)
    await runner.start()
    try:
        yield LocalFleet(harness, runner)
    finally:
        await runner.stop()
        await harness.close()


async def test_a_local_job_runs_the_tiny_trainer_to_completion(local: LocalFleet) -> None:
    h = local.harness
    config = {"max_train_steps": 5, "step_seconds": 0.01, "log_every": 1}
    job_id = await local.submit("local", config)
    await local.wait_until_ended(job_id)

    job = await h.job(job_id)
    assert (job.state, job.worker_id, job.attempts) == ("completed", LOCAL_WORKER_ID, 1)
    assert job.error is None
    assert job.progress is not None
    assert (job.progress["step"], job.progress["total"]) == (5, 5)
    assert await h.timeline_kinds(job_id) == ["submitted", "dispatched", "started", "completed"]
    logs = await h.store.read_logs(job_id)
    assert logs, "the trainer's output is stored"
    assert {line.attempt for line in logs} == {1}
    assert any("step" in line.line for line in logs)
    await eventually(lambda: h.worker_state(LOCAL_WORKER_ID) == "idle", "the runner to be idle")


@pytest.mark.parametrize(
    "settings", [FleetSettings(limits=Limits(max_log_bytes_per_attempt=300))], ids=["tiny-quota"]
)
async def test_a_local_jobs_log_has_the_same_quota_as_a_remote_one(local: LocalFleet) -> None:
    h = local.harness
    config = {"max_train_steps": 20, "step_seconds": 0.01, "log_every": 1}
    job_id = await local.submit("local", config)
    await local.wait_until_ended(job_id)
    assert (await h.job(job_id)).state == "completed"  # a quota reached is no failure
    (attempt,) = await h.store.list_attempts(job_id)
    assert 0 < attempt.log_bytes <= 300
    assert attempt.log_lines_dropped > 0
    logs = await h.store.read_logs(job_id)
    assert [line.stream for line in logs].count("notice") == 1


@pytest.mark.parametrize(
    "settings", [FleetSettings(limits=Limits(max_progress_keys=1))], ids=["one-key"]
)
async def test_a_local_job_whose_progress_is_refused_runs_on_to_its_end(
    local: LocalFleet,
) -> None:
    h = local.harness
    job_id = await local.submit("local", {"max_train_steps": 5, "step_seconds": 0.01})
    await local.wait_until_ended(job_id)
    job = await h.job(job_id)
    assert (job.state, job.progress) == ("completed", None)  # every report had more keys


async def test_auto_runs_locally_when_no_remote_worker_qualifies(local: LocalFleet) -> None:
    remote_only = await local.submit("worker", {"max_train_steps": 1})
    auto = await local.submit("auto", {"max_train_steps": 3, "step_seconds": 0.01})
    await local.wait_until_ended(auto)
    assert await local.harness.job_state(auto) == "completed"
    assert await local.harness.job_state(remote_only) == "pending"


async def test_a_local_job_is_cancelled_through_its_process(local: LocalFleet) -> None:
    h = local.harness
    job_id = await local.submit("local", {"max_train_steps": 10_000, "step_seconds": 0.05})

    def running() -> bool:
        job = h.job_actor(job_id)
        return job is not None and job.state == "running"

    await eventually(running, "the job to run")
    await h.fleet.cancel(job_id, actor="alice")
    await local.wait_until_ended(job_id)
    job = await h.job(job_id)
    assert (job.state, job.error) == ("cancelled", "cancelled by alice")


async def test_a_local_job_is_preempted_through_its_process_and_runs_again(
    local: LocalFleet,
) -> None:
    h = local.harness
    job_id = await local.submit("local", {"max_train_steps": 10_000, "step_seconds": 0.05})

    def on_attempt(number: int) -> bool:
        job = h.job_actor(job_id)
        return job is not None and job.state == "running" and job.attempts == number

    def training() -> bool:
        job = h.job_actor(job_id)  # past its start-up: its SIGTERM handler is in place
        return on_attempt(1) and job is not None and (job.rec.progress or {}).get("step", 0) > 2

    await eventually(training, "the job to train")
    reply = await h.fleet.preempt(job_id, "make room", actor="alice")
    assert reply["grace_seconds"] == h.settings.preempt_grace_s
    # The trainer saved on SIGTERM within the grace (not the executor's 5 s), and the
    # job went back to the queue and onto the local runner again, no retry spent.
    await eventually(lambda: on_attempt(2), "the second attempt to run", timeout_s=40)
    first = (await h.attempts(job_id))[0]
    assert (first.outcome, first.reason) == ("preempted", "make room")
    log = "\n".join(r.line for r in await h.store.read_logs(job_id) if r.attempt == 1)
    assert "SIGTERM at step" in log
    await h.fleet.cancel(job_id, actor="alice")
    await local.wait_until_ended(job_id)


class _RecordingExecutor:
    def __init__(self) -> None:
        self.specs: list[Any] = []

    async def run(self, spec: Any, on_event: Any) -> Any:
        from tunefleet.agent.job_events import JobOutcome

        self.specs.append(spec)
        return JobOutcome("completed", 0, None, [], {"stored": True, "keys": 2, "bytes": 10})


class _QuietFleet:
    def __init__(self) -> None:
        self.reports: list[Any] = []

    async def report_status(self, *args: Any) -> None:
        self.reports.append(args[-1])

    def report_written(self, *args: Any) -> None:
        return None


async def test_the_local_trainer_gets_the_upload_credentials() -> None:
    executor = _RecordingExecutor()
    runner = LocalRunner(
        _QuietFleet(),  # type: ignore[arg-type]
        executor,
        GpuInventory(),
        orchestrator_url="http://127.0.0.1:8001",
    )
    submit = {
        "job_id": "j_1",
        "attempt": 2,
        "config": {},
        "env": {"A": "1"},
        "upload_endpoint": "/api/artifacts",
        "upload_token": "ut_" + "x" * 43,
    }
    await runner._run(JobSubmitEvent.model_validate(submit))
    env = executor.specs[0].env
    assert env["A"] == "1"
    for name in ("TUNEFLEET", "SIMPLETUNER"):
        assert env[f"{name}_UPLOAD_ENDPOINT"] == "http://127.0.0.1:8001/api/artifacts"
        assert env[f"{name}_UPLOAD_TOKEN"] == submit["upload_token"]
    await runner._run(
        JobSubmitEvent.model_validate({**submit, "upload_endpoint": "", "upload_token": ""})
    )
    assert "TUNEFLEET_UPLOAD_TOKEN" not in executor.specs[1].env


async def test_the_local_runner_stores_outputs_and_says_so_in_its_final_report() -> None:
    executor = _RecordingExecutor()
    fleet = _QuietFleet()
    runner = LocalRunner(fleet, executor, GpuInventory())  # type: ignore[arg-type]
    submit = {
        "job_id": "j_1",
        "attempt": 3,
        "config": {},
        "upload_endpoint": "http://127.0.0.1:8001/api/artifacts",
        "upload_token": "ut_" + "x" * 43,
        "resume_checkpoint": "checkpoint-40",
    }
    await runner._run(JobSubmitEvent.model_validate(submit))
    plan = executor.specs[0].artifacts
    assert (plan.endpoint, plan.resume_checkpoint) == (submit["upload_endpoint"], "checkpoint-40")
    final = fleet.reports[-1]
    assert (final.status, final.outputs) == ("completed", {"stored": True, "keys": 2, "bytes": 10})


async def test_the_local_runner_runs_what_an_agent_would_run_on_its_gpus() -> None:
    """It reads a job_submit as a remote agent does (the same model, the same JobSpec)
    and adds only the GPUs it hands the job."""
    submit = JobSubmitEvent(
        job_id="j_1",
        config={"max_train_steps": 1},
        upload_endpoint="/api/artifacts",
        upload_token="ut_" + "x" * 43,
        resume_checkpoint="checkpoint-10",
        hf_token="hf_secret",
        attempt=2,
        command=["python", "train.py"],
        env={"EPOCHS": "3"},
        requirements=JobRequirements(target="local", gpu_count=1),
    )
    executor = _RecordingExecutor()
    fleet = _QuietFleet()
    inventory = GpuInventory(devices=(GpuDevice(0, "A100", 80.0), GpuDevice(1, "A100", 80.0)))
    runner = LocalRunner(
        fleet,  # type: ignore[arg-type]
        executor,  # type: ignore[arg-type]
        inventory,
        orchestrator_url="http://127.0.0.1:8001",
    )
    await runner._on_event(StreamEvent(1, "job_submit", submit.model_dump(), "j_1"))
    assert runner._job_task is not None
    await runner._job_task

    (spec,) = executor.specs
    agent = job_spec(submit, "http://127.0.0.1:8001")
    assert spec.env == {**agent.env, "CUDA_VISIBLE_DEVICES": "0"}
    assert spec.env["HF_TOKEN"] == "hf_secret"
    assert (spec.job_id, spec.attempt, spec.command, spec.config, spec.artifacts) == (
        agent.job_id,
        agent.attempt,
        agent.command,
        agent.config,
        agent.artifacts,
    )
    assert [report.status for report in fleet.reports] == ["starting", "completed"]
