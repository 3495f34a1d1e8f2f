"""``tunefleet.client.Client`` against a real orchestrator and agent: every method, and
the errors the orchestrator itself answers (400, 401, 403, 404, 409)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.e2e.harness import ADMIN_TOKEN, Orchestrator
from tunefleet.client import (
    BadRequest,
    Client,
    Conflict,
    Forbidden,
    JobFailed,
    LocalConfigError,
    NotFound,
    Unauthorized,
    WaitTimeout,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_submit_wait_logs_metrics_artifacts_and_download(
    tf: Client, agent: str, tmp_path: Path
) -> None:
    submitted = tf.submit("quick", name="client-quick")
    assert submitted["success"] and submitted["job_id"].startswith("j_")
    job_id = submitted["job_id"]
    polled: list[str] = []
    job = tf.wait(
        job_id, timeout_s=60, poll_initial_s=0.1, on_poll=lambda j: polled.append(j["status"])
    )
    assert job["status"] == "completed" and job["worker_id"] == agent
    assert polled[-1] == "completed"
    assert job["attempt_history"][0]["outcome"] == "completed"
    assert tf.get(job_id)["name"] == "client-quick"

    lines = tf.logs(job_id)
    assert any(line["line"].startswith("done: w ") for line in lines)
    assert all(line["stream"] in ("stdout", "stderr", "notice") for line in lines)
    assert tf.logs(job_id, stream="stderr") == []

    points = tf.metrics(job_id)
    assert points and "loss" in points[-1]["values"] and points[-1]["step"] == 20

    listing = tf.artifacts(job_id)
    keys = {item["key"] for item in listing["artifacts"]}
    assert "model.json" in keys and listing["checkpoints"][0]["name"] == "checkpoint-20"

    (model,) = tf.download(job_id, "model.json", to=tmp_path)
    assert model.path == tmp_path / "model.json"
    stored = next(a for a in listing["artifacts"] if a["key"] == "model.json")
    assert model.sha256 == stored["sha256"] == hashlib.sha256(model.path.read_bytes()).hexdigest()
    assert json.loads(model.path.read_text())["step"] == 20

    everything = tf.download(job_id, to=tmp_path / "all")
    assert {d.key for d in everything} == keys
    assert (tmp_path / "all" / "checkpoint-20" / "state.json").is_file()

    page = tf.jobs(status="completed", limit=500)
    assert job_id in {j["job_id"] for j in page["jobs"]}
    assert tf.jobs(status=["failed"], limit=500)["jobs"] == [] or all(
        j["status"] == "failed" for j in tf.jobs(status=["failed"])["jobs"]
    )


def test_a_broken_download_resumes_from_its_part_file(
    tf: Client, agent: str, tmp_path: Path
) -> None:
    job_id = tf.submit("quick")["job_id"]
    tf.wait(job_id, timeout_s=60, poll_initial_s=0.1)
    whole = tf.download(job_id, "model.json", to=tmp_path / "whole")[0].path.read_bytes()
    (tmp_path / "resumed").mkdir()
    (tmp_path / "resumed" / "model.json.part").write_bytes(whole[:10])
    got: list[int] = []
    (resumed,) = tf.download(job_id, "model.json", to=tmp_path / "resumed", on_bytes=got.append)
    assert resumed.path.read_bytes() == whole and resumed.size == len(whole)
    assert got[0] == 10 and sum(got) == len(whole)  # what the part held, then the rest
    assert not (tmp_path / "resumed" / "model.json.part").exists()


def test_follow_yields_lines_as_they_come_until_the_job_ends(tf: Client, agent: str) -> None:
    job_id = tf.submit("quick")["job_id"]
    lines = list(tf.logs(job_id, follow=True))
    assert any(line["line"].startswith("done: w ") for line in lines)
    assert [line["seq"] for line in lines] == sorted(line["seq"] for line in lines)
    assert tf.get(job_id)["status"] == "completed"


def test_wait_times_out_and_the_job_goes_on_until_cancelled(tf: Client, agent: str) -> None:
    job_id = tf.submit("slow")["job_id"]
    with pytest.raises(WaitTimeout) as late:
        tf.wait(job_id, timeout_s=0.5, poll_initial_s=0.1)
    assert isinstance(late.value, TimeoutError)
    assert late.value.job_id == job_id and late.value.job_status != "completed"
    assert "the job goes on" in str(late.value)
    # Leaving a followed stream early closes it; the job is unaffected.
    for _line in tf.logs(job_id, follow=True):
        break
    assert tf.get(job_id)["status"] in ("pending", "dispatched", "running")
    cancelled = tf.cancel(job_id, reason="client test")
    assert cancelled["job_id"] == job_id
    job = tf.wait(job_id, timeout_s=60, poll_initial_s=0.1)
    assert job["status"] == "cancelled"
    with pytest.raises(Conflict) as ended:
        tf.cancel(job_id)
    assert ended.value.status == 409 and ended.value.detail


def test_wait_check_raises_job_failed_with_the_job(tf: Client, agent: str) -> None:
    job_id = tf.submit("broken", max_retries=0)["job_id"]
    with pytest.raises(JobFailed) as failed:
        tf.wait(job_id, timeout_s=60, check=True, poll_initial_s=0.1)
    assert failed.value.job["status"] == "failed" and failed.value.job_status == "failed"
    assert str(failed.value).startswith(f"{job_id} failed")


def test_submit_an_inline_config_and_a_local_file(tf: Client, agent: str, tmp_path: Path) -> None:
    config = {
        "tunefleet_command": ["python", "-m", "tunefleet.examples.tiny_trainer"],
        "max_train_steps": 3,
        "output_dir": "output",
    }
    inline = tf.submit(config, name="inline")
    assert tf.wait(inline["job_id"], timeout_s=60, poll_initial_s=0.1)["status"] == "completed"
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(config))
    from_file = tf.submit(path)
    assert tf.get(from_file["job_id"])["name"] == "mine"
    tf.wait(from_file["job_id"], timeout_s=60, poll_initial_s=0.1)
    with pytest.raises(LocalConfigError, match="no such file"):
        tf.submit(tmp_path / "missing.json")


def test_workers_whoami_and_any_endpoint(tf: Client, agent: str) -> None:
    workers = tf.workers()
    assert agent in {w["id"] for w in workers}
    assert tf.workers(status="offline") == [] or all(
        w["status"] == "offline" for w in tf.workers(status="offline")
    )
    assert "admin.workers" in tf.whoami()["permissions"]
    assert "queue_depth" in tf.request("GET", "/api/queue/stats")


def test_the_orchestrators_refusals_are_typed_errors(
    tf: Client, orchestrator: Orchestrator
) -> None:
    with pytest.raises(NotFound) as missing:
        tf.get("j_nope")
    assert missing.value.status == 404 and missing.value.detail.startswith("Job not found")
    with pytest.raises(BadRequest) as bad:
        tf.submit("quick", target="nowhere")  # type: ignore[arg-type]
    assert bad.value.status == 400 and "target" in bad.value.detail
    with pytest.raises(NotFound):
        tf.download("j_nope", "model.json")
    with pytest.raises(BadRequest):
        tf.submit("no-such-config")


def test_tokens_are_refused_with_what_to_do(orchestrator: Orchestrator) -> None:
    with (
        Client(orchestrator.url, token="tf_not-a-real-token") as bad,
        pytest.raises(Unauthorized) as refused,
    ):
        bad.jobs()
    assert refused.value.status == 401
    assert "rejected the API token (HTTP 401)" in str(refused.value)
    assert "token= / TUNEFLEET_TOKEN" in str(refused.value)  # spelled for Python callers
    with Client(orchestrator.url, token="") as anonymous, pytest.raises(Unauthorized) as none:
        anonymous.jobs()
    assert "No API token: pass token= or set TUNEFLEET_TOKEN" in str(none.value)
    created = orchestrator.request(
        "POST", "/api/admin/tokens", {"name": "client-submit-only", "permissions": ["queue.submit"]}
    )
    with Client(orchestrator.url, token=created["token"]) as narrow:
        with pytest.raises(Forbidden) as denied:
            narrow.workers()
        assert narrow.jobs(limit=1)["limit"] == 1  # reading the queue needs any token
    assert denied.value.status == 403
    assert "tunefleet tokens create NAME --permission admin.workers" in str(denied.value)


def test_the_token_and_url_come_from_the_environment(
    orchestrator: Orchestrator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNEFLEET_URL", orchestrator.url)
    monkeypatch.setenv("TUNEFLEET_TOKEN", f"  {ADMIN_TOKEN}\n")  # pasted with whitespace
    with Client() as tf:
        assert tf.url == orchestrator.url
        assert "admin.workers" in tf.whoami()["permissions"]
