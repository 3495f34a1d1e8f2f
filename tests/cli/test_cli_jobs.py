"""`tunefleet jobs submit|list|show|cancel|preempt|logs` against a real orchestrator."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.e2e.harness import Orchestrator, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
Invoke = Callable[..., Result]
NOWHERE = ("--label", "pool=nowhere", "--target", "worker")  # stays pending


def _submit_json(tf: Invoke, *args: str) -> dict[str, object]:
    result = tf("jobs", "submit", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_submit_by_name_sends_every_requirement(tf: Invoke, orchestrator: Orchestrator) -> None:
    result = tf(
        "jobs", "submit", "quick", *NOWHERE, "--label", "gpu_type=a100*", "--gpus", "2",
        "--min-vram", "40", "--gpu-name", "*A100*", "--priority", "7", "--retries", "1",
        "--timeout", "90", "--env", "WANDB_MODE=offline", "--name", "sized",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("Submitted j_") and ": pending" in first
    job_id = first.split()[1].rstrip(":")
    assert f"tunefleet jobs show {job_id} --follow" in result.stdout
    job = orchestrator.job(job_id)
    assert job["worker_labels"] == {"pool": "nowhere", "gpu_type": "a100*"}
    assert (job["gpu_count"], job["min_vram_gb"], job["gpu_name"]) == (2, 40.0, "*A100*")
    assert (job["priority"], job["max_retries"], job["timeout_minutes"]) == (7, 1, 90.0)
    assert (job["name"], job["target"], job["env"]) == (
        "sized",
        "worker",
        {"WANDB_MODE": "<hidden>"},
    )


@pytest.mark.parametrize(
    ("filename", "text"),
    [
        ("local.json", '{"max_train_steps": 3, "learning_rate": 0.1}'),
        ("local.toml", "max_train_steps = 3\nlearning_rate = 0.1\n"),
        ("local.yaml", "max_train_steps: 3\nlearning_rate: 0.1\n"),
    ],
)
def test_submit_a_local_file_sends_it_inline(
    tf: Invoke, orchestrator: Orchestrator, tmp_path: Path, filename: str, text: str
) -> None:
    path = tmp_path / filename
    path.write_text(text)
    data = _submit_json(tf, str(path), *NOWHERE)
    job = orchestrator.job(str(data["job_id"]))
    assert job["config"] == {"max_train_steps": 3, "learning_rate": 0.1}
    assert job["config_name"] is None and job["name"] == "local"


def test_submit_a_simpletuner_folder_sends_its_dataloader(
    tf: Invoke, orchestrator: Orchestrator, tmp_path: Path
) -> None:
    folder = tmp_path / "my-run"
    folder.mkdir()
    (folder / "config.json").write_text('{"max_train_steps": 5}')
    (folder / "multidatabackend.json").write_text('[{"id": "pics", "type": "local"}]')
    data = _submit_json(tf, str(folder), *NOWHERE)
    job = orchestrator.job(str(data["job_id"]))
    assert job["dataloader"] == [{"id": "pics", "type": "local"}]
    assert job["name"] == "my-run"


def test_submit_usage_errors_exit_2(tf: Invoke, tmp_path: Path) -> None:
    missing = tf("jobs", "submit", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2
    assert "nope.yaml: no such file" in missing.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("this is = = not toml")
    broken = tf("jobs", "submit", str(bad))
    assert broken.exit_code == 2 and "invalid TOML" in broken.stderr
    label = tf("jobs", "submit", "quick", "--label", "no-equals-sign")
    assert label.exit_code == 2 and "'no-equals-sign' is not KEY=VALUE" in label.stderr
    gpus = tf("jobs", "submit", "quick", "--gpus", "-1")
    assert gpus.exit_code == 2


def test_submit_unknown_config_name_exits_1_with_the_orchestrators_detail(tf: Invoke) -> None:
    result = tf("jobs", "submit", "no-such-config")
    assert result.exit_code == 1
    assert "config 'no-such-config' not found" in result.stderr
    assert "available: " in result.stderr and "(HTTP 400)" in result.stderr


def test_list_table_and_json(tf: Invoke) -> None:
    job_id = _submit_json(tf, "quick", *NOWHERE, "--name", "listed-job")["job_id"]
    table = tf("jobs", "list", "--status", "pending")
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[0].split() == [
        "ID", "NAME", "STATUS", "OWNER", "WORKER", "PROGRESS", "PRI", "SUBMITTED",
    ]  # fmt: skip
    row = next(line for line in table.stdout.splitlines() if str(job_id) in line)
    assert "listed-job" in row and "pending" in row and "just now" in row
    assert "admin/default" in row
    data = json.loads(tf("jobs", "list", "--json", "--limit", "500").stdout)
    mine = next(j for j in data["jobs"] if j["job_id"] == job_id)
    assert mine["submitted_at"].endswith("Z") and mine["status"] == "pending"


def test_an_empty_filtered_list_names_the_filter(tf: Invoke) -> None:
    # "No jobs. Submit one with ..." would be wrong: jobs exist, none matches.
    result = tf("jobs", "list", "--status", "running", "--worker", "w_nobody")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "No job matches --status running --worker w_nobody."
    several = tf("jobs", "list", "--status", "failed", "--status", "cancelled",
                 "--target", "local", "--worker", "w_nobody", "--offset", "5")  # fmt: skip
    assert several.stdout.strip() == (
        "No job matches --status failed --status cancelled --target local --worker w_nobody "
        "--offset 5."
    )


def test_list_pages_with_a_footer(tf: Invoke) -> None:
    for _ in range(2):
        _submit_json(tf, "quick", *NOWHERE)
    result = tf("jobs", "list", "--limit", "1")
    assert result.exit_code == 0
    assert "--offset 1 for more" in result.stdout.splitlines()[-1]


def test_show_table_and_json(tf: Invoke, agent: str) -> None:
    # With the pool=cli agent connected, the reason names the label no worker has (with
    # no worker at all, it would say that none is connected).
    job_id = str(_submit_json(tf, "quick", *NOWHERE, "--priority", "3")["job_id"])
    table = tf("jobs", "show", job_id)
    assert table.exit_code == 0, table.output
    fields = {
        line.split(None, 1)[0]: line.split(None, 1)[1].strip()
        for line in table.stdout.splitlines()
        if line.strip()
    }
    assert fields["ID"] == job_id and fields["Status"].startswith("pending")
    assert fields["Priority"] == "3" and fields["Config"] == "quick"
    assert "no worker matches label pool=nowhere" in fields["Waiting"]  # why it waits
    data = json.loads(tf("jobs", "show", job_id, "--json").stdout)
    assert data["job_id"] == job_id and data["timeline"]


def test_cancel_a_pending_job(tf: Invoke, orchestrator: Orchestrator) -> None:
    job_id = str(_submit_json(tf, "quick", *NOWHERE)["job_id"])
    result = tf("jobs", "cancel", job_id, "--reason", "wrong config")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"Cancelled {job_id}."
    assert orchestrator.job(job_id)["status"] == "cancelled"
    again = tf("jobs", "cancel", job_id, "--json")
    assert again.exit_code == 1
    assert f"job {job_id} is already cancelled" in again.stderr


def test_preempt_a_running_job_and_the_refusals(
    tf: Invoke, orchestrator: Orchestrator, agent: str
) -> None:
    job_id = orchestrator.submit(
        config_name="slow", target="worker", max_retries=0, worker_labels={"pool": "cli"}
    )["job_id"]
    orchestrator.wait_job(job_id, {"running"})
    result = tf("jobs", "preempt", job_id, "--reason", "make room")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        f"Preempting {job_id} (attempt 1): its trainer has 120 s to write a checkpoint, "
        "then the job is queued again."
    )
    # Back on the same worker as attempt 2 of a job with no retries.
    wait_until(lambda: orchestrator.job(job_id)["attempts"] == 2, 30, 0.2, "attempt 2")
    job = orchestrator.job(job_id)
    assert job["attempt_history"][0]["outcome"] == "preempted"
    orchestrator.request("POST", f"/api/queue/{job_id}/cancel", {})
    orchestrator.wait_job(job_id, {"cancelled"})
    ended = tf("jobs", "preempt", job_id)
    assert ended.exit_code == 1
    assert f"job {job_id} is cancelled, not dispatched or running" in ended.stderr
    unknown = tf("jobs", "preempt", "j_nope")
    assert unknown.exit_code == 1 and "Job not found: j_nope" in unknown.stderr


def test_logs_table_json_and_filters(tf: Invoke, orchestrator: Orchestrator, agent: str) -> None:
    job_id = orchestrator.submit(
        config_name="broken", target="worker", max_retries=0, worker_labels={"pool": "cli"}
    )["job_id"]
    orchestrator.wait_job(job_id, {"failed"})
    text = tf("jobs", "logs", job_id)
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines()[0].startswith("training y = 3.0x-1.0")
    assert "injected failure" in text.stdout
    data = json.loads(tf("jobs", "logs", job_id, "--json").stdout)
    assert data["job_id"] == job_id and data["lines"][0]["at"].endswith("Z")
    stderr_only = tf("jobs", "logs", job_id, "--stream", "stderr")
    assert stderr_only.stdout.strip().splitlines() == [
        "error: injected failure at step 4 (fail_at_step)"
    ]


def test_metrics_table_csv_and_json(tf: Invoke, orchestrator: Orchestrator, agent: str) -> None:
    job_id = orchestrator.submit(
        config_name="quick", target="worker", worker_labels={"pool": "cli"}
    )["job_id"]
    orchestrator.wait_job(job_id, {"completed"})
    data = json.loads(tf("jobs", "metrics", job_id, "--json").stdout)
    points = data["points"]
    # The real agent and trainer reported steps with loss, lr and epoch; the last is 10.
    assert points and points[-1]["step"] == 10
    assert {"loss", "lr", "epoch"} <= set(points[-1]["values"])
    steps = [p["step"] for p in points]
    assert steps == sorted(set(steps))
    table = tf("jobs", "metrics", job_id)
    assert table.exit_code == 0, table.output
    header = table.stdout.splitlines()[0].split()
    assert header == ["ATTEMPT", "STEP", "loss", "epoch", "lr"]
    csv_lines = tf("jobs", "metrics", job_id, "--csv").stdout.splitlines()
    assert csv_lines[0] == "attempt,step,at,loss,epoch,lr"
    assert len(csv_lines) == len(points) + 1
    assert tf("jobs", "metrics", job_id, "--attempt", "2", "--json").stdout.count('"step"') == 0


def test_metrics_of_an_unknown_job_exit_1(tf: Invoke) -> None:
    result = tf("jobs", "metrics", "j_nope")
    assert result.exit_code == 1
    assert "Job not found: j_nope (HTTP 404)" in result.stderr


def test_logs_of_an_unknown_job_exit_1(tf: Invoke) -> None:
    result = tf("jobs", "logs", "j_nope")
    assert result.exit_code == 1
    assert "Job not found: j_nope (HTTP 404)" in result.stderr
