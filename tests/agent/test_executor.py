"""JobExecutor with real subprocesses: job files, environment, command, outcomes."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
from executor_testkit import Recorder, executor, script, spec

from tunefleet.agent.executor import JobExecutor, JobOutcome

PRINT_ENV = """
    import json, os
    keys = ["CONFIG_PATH", "SIMPLETUNER_CONFIG_BACKEND", "TUNEFLEET_JOB_ID", "TUNEFLEET_ATTEMPT",
            "TUNEFLEET_PROGRESS_FILE", "TUNEFLEET_JOB_DIR", "CUDA_VISIBLE_DEVICES", "EXTRA",
            "PYTHONUNBUFFERED"]
    print(json.dumps({"env": {k: os.environ.get(k) for k in keys}, "cwd": os.getcwd()}))
"""


def printed_json(rec: Recorder) -> dict[str, object]:
    return json.loads(rec.texts("stdout")[0])


async def test_job_gets_its_files_environment_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rec = Recorder()
    config = {"max_train_steps": 5, "learning_rate": 0.1}
    dataloader = [{"id": "pics", "type": "local", "instance_data_dir": "/data/pics"}]
    outcome = await executor(tmp_path).run(
        spec(
            script(PRINT_ENV),
            job_id="j_42",
            attempt=2,
            config=config,
            dataloader=dataloader,
            env={"EXTRA": 7},
        ),
        rec,
    )
    assert outcome == JobOutcome("completed", 0, None, outcome.tail)
    job_dir = tmp_path / "jobs" / "j_42" / "attempt-2"
    written = json.loads((job_dir / "config.json").read_text())
    assert written == {**config, "data_backend_config": str(job_dir / "multidatabackend.json")}
    assert json.loads((job_dir / "multidatabackend.json").read_text()) == dataloader
    assert (job_dir / "progress.jsonl").exists()
    seen = printed_json(rec)
    assert seen["cwd"] == str(job_dir)
    assert seen["env"] == {
        "CONFIG_PATH": str(job_dir / "config.json"),
        "SIMPLETUNER_CONFIG_BACKEND": "json",
        "TUNEFLEET_JOB_ID": "j_42",
        "TUNEFLEET_ATTEMPT": "2",
        "TUNEFLEET_PROGRESS_FILE": str(job_dir / "progress.jsonl"),
        "TUNEFLEET_JOB_DIR": str(job_dir),
        "CUDA_VISIBLE_DEVICES": None,
        "EXTRA": "7",
        "PYTHONUNBUFFERED": "1",
    }
    assert [s.job_dir for s in rec.started] == [job_dir]


async def test_cuda_visible_devices_from_the_executor_wins(tmp_path: Path) -> None:
    rec = Recorder()
    ex = executor(tmp_path, cuda_visible_devices="1,3")
    await ex.run(spec(script(PRINT_ENV), env={"CUDA_VISIBLE_DEVICES": "0"}), rec)
    assert printed_json(rec)["env"]["CUDA_VISIBLE_DEVICES"] == "1,3"  # type: ignore[index]


async def test_tunefleet_variables_cannot_be_overridden_by_job_env(tmp_path: Path) -> None:
    rec = Recorder()
    await executor(tmp_path).run(
        spec(script(PRINT_ENV), env={"TUNEFLEET_JOB_ID": "spoofed", "PYTHONUNBUFFERED": "0"}), rec
    )
    env = printed_json(rec)["env"]
    assert env["TUNEFLEET_JOB_ID"] == "j_1"  # type: ignore[index]
    assert env["PYTHONUNBUFFERED"] == "0"  # type: ignore[index]  (the job may choose this)


async def test_dashed_config_style_gets_a_dashed_data_backend_key(tmp_path: Path) -> None:
    await executor(tmp_path).run(
        spec(script("pass"), config={"--max_train_steps": 3}, dataloader=[]), Recorder()
    )
    job_dir = tmp_path / "jobs" / "j_1" / "attempt-1"
    written = json.loads((job_dir / "config.json").read_text())
    assert written["--data_backend_config"] == str(job_dir / "multidatabackend.json")
    assert "data_backend_config" not in written


async def test_config_naming_its_own_data_backend_keeps_it(tmp_path: Path) -> None:
    config = {"data_backend_config": "/mine.json"}
    await executor(tmp_path).run(
        spec(script("pass"), config=config, dataloader={"a": 1}), Recorder()
    )
    job_dir = tmp_path / "jobs" / "j_1" / "attempt-1"
    assert json.loads((job_dir / "config.json").read_text()) == config
    assert (job_dir / "multidatabackend.json").exists()


async def test_no_dataloader_writes_no_dataloader_file(tmp_path: Path) -> None:
    await executor(tmp_path).run(spec(script("pass")), Recorder())
    job_dir = tmp_path / "jobs" / "j_1" / "attempt-1"
    assert not (job_dir / "multidatabackend.json").exists()
    assert "data_backend_config" not in json.loads((job_dir / "config.json").read_text())


async def test_string_command_is_split_and_python_means_this_interpreter(tmp_path: Path) -> None:
    rec = Recorder()
    outcome = await executor(tmp_path).run(
        spec("python -c 'import sys; print(sys.executable)'"), rec
    )
    assert outcome.status == "completed"
    assert rec.texts("stdout") == [sys.executable]


async def test_default_command_runs_when_the_job_names_none(tmp_path: Path) -> None:
    rec = Recorder()
    for command in (None, []):
        outcome = await executor(tmp_path).run(spec(command), rec)
        assert outcome.status == "completed"
    assert rec.texts("stdout") == ["default command ran", "default command ran"]


async def test_no_command_at_all_fails_cleanly(tmp_path: Path) -> None:
    outcome = await JobExecutor(tmp_path, []).run(spec(None), Recorder())
    assert outcome.status == "failed"
    assert outcome.exit_code is None
    assert "no command" in (outcome.error or "")


async def test_unparseable_string_command_fails_cleanly(tmp_path: Path) -> None:
    outcome = await executor(tmp_path).run(spec("python -c 'unclosed"), Recorder())
    assert outcome.status == "failed"
    assert "cannot parse command" in (outcome.error or "")


async def test_exit_zero_at_once_completes(tmp_path: Path) -> None:
    rec = Recorder()
    outcome = await executor(tmp_path).run(spec(["true"]), rec)
    assert outcome == JobOutcome("completed", 0, None, [])
    assert len(rec.started) == 1
    assert rec.log_lines == []


async def test_nonzero_exit_fails_with_code_last_stderr_line_and_tail(tmp_path: Path) -> None:
    body = """
        import sys
        for i in range(30):
            print(f"out {i}")
        print("Traceback (most recent call last):", file=sys.stderr)
        print("ValueError: boom", file=sys.stderr)
        sys.stdout.flush()
        sys.exit(7)
    """
    outcome = await executor(tmp_path).run(spec(script(body)), Recorder())
    assert outcome.status == "failed"
    assert outcome.exit_code == 7
    assert outcome.error == "exit code 7: ValueError: boom"
    assert len(outcome.tail) == 20
    assert "ValueError: boom" in outcome.tail
    assert "out 29" in outcome.tail


async def test_nonzero_exit_without_stderr_names_last_stdout_line(tmp_path: Path) -> None:
    outcome = await executor(tmp_path).run(
        spec(script("print('loading'); print('out of disk'); raise SystemExit(2)")), Recorder()
    )
    assert outcome.error == "exit code 2: out of disk"


async def test_silent_failure_reports_just_the_code(tmp_path: Path) -> None:
    outcome = await executor(tmp_path).run(spec(["false"]), Recorder())
    # The evidence for the orchestrator's failure kinds (issue 26) goes with it.
    failure = {"exit_code": 1, "signal": None, "oom": None, "log_tail": []}
    assert outcome == JobOutcome("failed", 1, "exit code 1", [], failure=failure)


async def test_killed_by_signal_is_named(tmp_path: Path) -> None:
    outcome = await executor(tmp_path).run(
        spec(script("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")), Recorder()
    )
    assert outcome.status == "failed"
    assert outcome.exit_code == -signal.SIGKILL
    assert outcome.error == "killed by signal SIGKILL"
    assert outcome.failure is not None and outcome.failure["signal"] == "SIGKILL"


async def test_command_not_found_fails_without_raising(tmp_path: Path) -> None:
    rec = Recorder()
    ex = executor(tmp_path)
    outcome = await ex.run(spec(["/nonexistent/trainer", "--go"]), rec)
    assert outcome.status == "failed"
    assert outcome.exit_code is None
    assert outcome.error is not None
    assert "cannot start command '/nonexistent/trainer'" in outcome.error
    assert "No such file" in outcome.error
    assert rec.started == []
    assert rec.texts("stderr") == ["[tunefleet] " + outcome.error]
    log_text = (tmp_path / "jobs" / "j_1" / "attempt-1" / "output.log").read_text()
    assert outcome.error in log_text
    assert not ex.busy


async def test_command_not_executable_fails_without_raising(tmp_path: Path) -> None:
    plain = tmp_path / "not-executable.sh"
    plain.write_text("echo hi\n")
    outcome = await executor(tmp_path).run(spec([str(plain)]), Recorder())
    assert outcome.status == "failed"
    assert "Permission denied" in (outcome.error or "")


@pytest.mark.parametrize("job_id", ["../escape", "a/b", "", ".hidden"])
async def test_unsafe_job_id_fails_and_writes_nothing(tmp_path: Path, job_id: str) -> None:
    work = tmp_path / "work"
    outcome = await executor(work).run(spec(script("pass"), job_id=job_id), Recorder())
    assert outcome.status == "failed"
    assert "not a safe directory name" in (outcome.error or "")
    assert not work.exists()


async def test_bad_attempt_number_fails(tmp_path: Path) -> None:
    outcome = await executor(tmp_path).run(spec(script("pass"), attempt=0), Recorder())
    assert outcome.status == "failed"
    assert "attempt must be 1 or more" in (outcome.error or "")


async def test_unwritable_work_dir_fails_cleanly(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    outcome = await executor(blocker).run(spec(script("pass")), Recorder())
    assert outcome.status == "failed"
    assert "cannot prepare job directory" in (outcome.error or "")


async def test_rerun_of_same_attempt_starts_with_fresh_progress(tmp_path: Path) -> None:
    body = """
        import json, os
        with open(os.environ["TUNEFLEET_PROGRESS_FILE"], "a") as f:
            f.write(json.dumps({"step": %d}) + "\\n")
    """
    ex = executor(tmp_path)
    await ex.run(spec(script(body % 9)), Recorder())
    rec = Recorder()
    await ex.run(spec(script(body % 1)), rec)
    assert rec.progress[-1]["step"] == 1
    progress_file = tmp_path / "jobs" / "j_1" / "attempt-1" / "progress.jsonl"
    assert progress_file.read_text().count("\n") == 1


async def test_default_command_may_be_a_string(tmp_path: Path) -> None:
    rec = Recorder()
    ex = JobExecutor(tmp_path, "python -c 'print(\"from a string\")'")
    assert (await ex.run(spec(None), rec)).status == "completed"
    assert rec.texts("stdout") == ["from a string"]


async def test_a_command_outside_the_allowed_ones_fails_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    allowed = ("python -m simpletuner.train",)
    rec = Recorder()
    refused = await executor(tmp_path, allowed_commands=allowed).run(
        spec(["sh", "-c", f"touch {marker}"]), rec
    )
    assert (refused.status, refused.exit_code) == ("failed", None)
    assert (refused.error or "").startswith('refused by this worker: command "sh -c ')
    assert (refused.error or "").endswith(
        "is not among the allowed commands ('python -m simpletuner.train')"
    )
    assert rec.events == [] and not marker.exists()
    assert not (tmp_path / "jobs").exists()  # not even its directory was made


async def test_loader_env_is_refused_under_an_allowed_command(tmp_path: Path) -> None:
    allowed = ("sh -c **",)
    outcome = await executor(tmp_path, allowed_commands=allowed).run(
        spec(["sh", "-c", "true"], env={"BASH_ENV": "/tmp/rc"}), Recorder()
    )
    assert outcome.status == "failed"
    assert (outcome.error or "").startswith("refused by this worker: env BASH_ENV changes how")


async def test_an_allowed_command_runs(tmp_path: Path) -> None:
    allowed = ("python -c **",)
    rec = Recorder()
    outcome = await executor(tmp_path, allowed_commands=allowed).run(
        spec(["python", "-c", "print('allowed')"]), rec
    )
    assert outcome.status == "completed" and rec.texts("stdout") == ["allowed"]


async def test_the_trainer_does_not_get_the_agents_worker_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIMPLETUNER_WORKER_TOKEN", "wt_secret")
    monkeypatch.setenv("KEPT", "yes")
    rec = Recorder()
    show = (
        "import os; print(os.environ.get('SIMPLETUNER_WORKER_TOKEN', 'unset'), os.environ['KEPT'])"
    )
    outcome = await executor(tmp_path).run(spec(["python", "-c", show]), rec)
    assert outcome.status == "completed"
    assert rec.texts("stdout") == ["unset yes"]


async def test_the_trainer_gets_no_credential_of_the_agent_however_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23: tunefleet's token variables are dropped too, and any variable holding the
    worker token the agent was given (--worker-token), whatever its name; the job's own
    upload token (set by the job's env) is what the trainer gets."""
    token = "wt_given-on-the-command-line"
    monkeypatch.setenv("TUNEFLEET_TOKEN", "tf_api-token-of-the-operator")
    monkeypatch.setenv("TUNEFLEET_ADMIN_TOKEN", "tf_admin")
    monkeypatch.setenv("MY_WORKER_SECRET_COPY", token)
    monkeypatch.setenv("KEPT", "yes")
    names = ("TUNEFLEET_TOKEN", "TUNEFLEET_ADMIN_TOKEN", "MY_WORKER_SECRET_COPY", "KEPT")
    show = (
        "import os; print(' '.join(os.environ.get(n, '-') for n in "
        f"{names!r} + ('TUNEFLEET_UPLOAD_TOKEN',)))"
    )
    rec = Recorder()
    job = spec(["python", "-c", show], env={"TUNEFLEET_UPLOAD_TOKEN": "ut_this-attempt"})
    outcome = await executor(tmp_path, withheld_secrets=(token,)).run(job, rec)
    assert outcome.status == "completed"
    assert rec.texts("stdout") == ["- - - yes ut_this-attempt"]


async def test_a_base_environment_replaces_the_agents_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local runner passes the orchestrator's environment scrubbed of its secrets."""
    monkeypatch.setenv("TUNEFLEET_ADMIN_TOKEN", "tf_secret")
    rec = Recorder()
    show = "import os; print(os.environ.get('TUNEFLEET_ADMIN_TOKEN', 'unset'), os.environ['KEPT'])"
    outcome = await executor(tmp_path, base_env={"KEPT": "yes"}).run(
        spec(["python", "-c", show]), rec
    )
    assert outcome.status == "completed"
    assert rec.texts("stdout") == ["unset yes"]
