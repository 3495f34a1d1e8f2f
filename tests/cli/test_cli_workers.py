"""`tunefleet workers ...` against a real orchestrator (and a real agent for drain)."""

from __future__ import annotations

import contextlib
import json
import shlex
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from tests.e2e.harness import Agent, ApiError, Orchestrator

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
Invoke = Callable[..., Result]


def _create(tf: Invoke, name: str, *extra: str) -> dict[str, str]:
    result = tf("workers", "create", name, *extra, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_create_prints_the_token_once_with_the_exact_worker_command(
    tf: Invoke, orchestrator: Orchestrator
) -> None:
    result = tf("workers", "create", "gpu-box-1", "--label", "gpu_type=a100", "--label", "dc=a")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Created persistent worker gpu-box-1 (w_")
    token = lines[2].strip()
    assert token.startswith("wt_")
    command = shlex.split(lines[4])
    assert command[:2] == ["tunefleet", "worker"]
    assert command[command.index("--worker-token") + 1] == token
    assert command[command.index("--orchestrator-url") + 1] == orchestrator.url
    assert command[command.index("--name") + 1] == "gpu-box-1"
    assert "--persistent" in command
    worker_id = lines[0].split("(")[1].rstrip(").")
    assert orchestrator.worker(worker_id)["labels"] == {"gpu_type": "a100", "dc": "a"}


def test_create_ephemeral_json_has_the_token_and_environment(tf: Invoke) -> None:
    data = _create(tf, "spot-1", "--ephemeral")
    assert data["worker_type"] == "ephemeral"
    assert data["token"].startswith("wt_")
    assert "--persistent" not in data["connection_command"]
    assert data["environment"]["SIMPLETUNER_WORKER_TOKEN"] == data["token"]


def test_a_taken_name_exits_1_naming_allow_duplicate_which_creates_it(tf: Invoke) -> None:
    first = _create(tf, "twin-1")
    again = tf("workers", "create", "twin-1")
    assert again.exit_code == 1
    assert f"a worker named 'twin-1' exists ({first['worker_id']})" in again.stderr
    assert "--allow-duplicate" in again.stderr
    second = _create(tf, "twin-1", "--allow-duplicate")
    assert second["worker_id"] != first["worker_id"]


def test_show_warns_where_the_agent_disagrees_with_the_administrator(
    tf: Invoke, orchestrator: Orchestrator
) -> None:
    created = _create(tf, "shown-name")
    body = json.dumps({"name": "other-box", "persistent": False}).encode()
    request = urllib.request.Request(
        orchestrator.url + "/api/workers/register", data=body, method="POST"
    )
    request.add_header("X-Worker-Token", created["token"])
    with urllib.request.urlopen(request, timeout=10) as response:
        answer = json.loads(response.read())
    assert (answer["name"], answer["worker_type"]) == ("shown-name", "persistent")
    result = tf("workers", "show", created["worker_id"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "Warning worker_type is persistent but its agent was started ephemeral" in text
    assert "the agent calls itself 'other-box'" in text


def _post_as_worker(orchestrator: Orchestrator, token: str, path: str, body: object) -> dict:
    request = urllib.request.Request(
        orchestrator.url + path, data=json.dumps(body).encode(), method="POST"
    )
    request.add_header("X-Worker-Token", token)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def test_list_and_show_give_the_gpu_health_and_why(tf: Invoke, orchestrator: Orchestrator) -> None:
    created = _create(tf, "sick-box")
    token = created["token"]
    worker_id = _post_as_worker(orchestrator, token, "/api/workers/register", {"name": "sick-box"})[
        "worker_id"
    ]
    reading = {
        "gpus": [
            {"index": 0, "xids": [], "temperature_c": 90},
            {"index": 1, "xids": [79], "temperature_c": 50},
        ],
        "missing": [],
    }
    beat = {"worker_id": worker_id, "status": "idle", "gpu_health": reading}
    _post_as_worker(orchestrator, token, "/api/workers/heartbeat", beat)
    table = tf("workers", "list")
    row = next(line for line in table.stdout.splitlines() if worker_id in line)
    assert "unhealthy" in row.split()
    shown = tf("workers", "show", worker_id)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.stdout.split())
    assert "Health unhealthy: Xid 79 on GPU 1" in text
    assert "GPU 0 at 90 °C" in text  # every finding, under the first
    assert "Quarantined GPU health: Xid 79 on GPU 1" in text  # the reading quarantined it
    none = _create(tf, "quiet-box")  # never reported: no health, not "healthy"
    assert "Health -" in " ".join(tf("workers", "show", none["worker_id"]).stdout.split())


def test_list_table_and_json(tf: Invoke) -> None:
    created = _create(tf, "listed-1", "--label", "team=nlp")
    table = tf("workers", "list")
    assert table.exit_code == 0, table.output
    header = table.stdout.splitlines()[0].split()
    assert header == [
        "ID", "NAME", "STATUS", "CONNECTED", "TYPE", "GPUS", "HEALTH", "LABELS", "JOB", "LAST",
        "SEEN",
    ]  # fmt: skip
    row = next(line for line in table.stdout.splitlines() if created["worker_id"] in line)
    assert "listed-1" in row and "connecting" in row and "team=nlp" in row
    assert row.split()[3] == "no"  # no open stream yet
    as_json = tf("workers", "list", "--json", "--status", "connecting")
    data = json.loads(as_json.stdout)
    mine = next(w for w in data["workers"] if w["id"] == created["worker_id"])
    assert mine["created_at"].endswith("Z")  # ISO 8601 in JSON, relative only in tables
    assert all(w["status"] == "connecting" for w in data["workers"])


def test_an_empty_filtered_list_names_the_filter(tf: Invoke) -> None:
    _create(tf, "unfiltered-1")  # workers exist, so "Create one" would be wrong
    assert json.loads(tf("workers", "list", "--status", "draining", "--json").stdout)["total"] == 0
    result = tf("workers", "list", "--status", "draining")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "No worker matches --status draining."


def test_show_table_and_json(tf: Invoke) -> None:
    created = _create(tf, "shown-1")
    table = tf("workers", "show", created["worker_id"])
    assert table.exit_code == 0, table.output
    fields = dict(line.split(None, 1) for line in table.stdout.splitlines() if " " in line)
    assert fields["Name"].strip() == "shown-1"
    assert fields["Status"].strip() == "connecting"
    assert table.stdout.count("just now") >= 1
    data = json.loads(tf("workers", "show", created["worker_id"], "--json").stdout)
    assert data["worker_id"] == created["worker_id"]


def test_show_unknown_worker_exits_1_with_the_detail(tf: Invoke) -> None:
    result = tf("workers", "show", "w_nope")
    assert result.exit_code == 1
    assert "Worker not found" in result.stderr or "w_nope" in result.stderr
    assert "(HTTP 404)" in result.stderr


@pytest.fixture
def second_agent(
    orchestrator: Orchestrator, cli_root: Path, tf: Invoke
) -> Iterator[tuple[Agent, str]]:
    created = _create(tf, "drainable", "--label", "pool=other")
    agent = Agent(
        orchestrator.url, created["token"], cli_root / "work-drain", "drainable", persistent=True
    ).start()
    orchestrator.wait_worker(created["worker_id"], "idle")
    yield agent, created["worker_id"]
    agent.stop()
    # Gone whatever the test left of it: the next test's worker takes the same name.
    with contextlib.suppress(ApiError):
        orchestrator.request("DELETE", f"/api/admin/workers/{created['worker_id']}?force=true")


def test_drain_resume_rotate_and_delete_a_live_worker(
    tf: Invoke, orchestrator: Orchestrator, second_agent: tuple[Agent, str]
) -> None:
    agent, worker_id = second_agent
    drained = tf("workers", "drain", worker_id)
    assert drained.exit_code == 0, drained.output
    assert f"Draining {worker_id} (now draining)" in drained.stdout
    assert orchestrator.worker(worker_id)["status"] == "draining"

    resumed = tf("workers", "resume", worker_id, "--json")
    assert json.loads(resumed.stdout) == {"success": True, "worker_id": worker_id, "status": "idle"}
    again = tf("workers", "resume", worker_id)
    assert again.exit_code == 1  # 409: not draining
    assert "HTTP 409" in again.stderr

    refused = tf("workers", "delete", worker_id, "--yes")
    assert refused.exit_code == 1
    assert f"delete it with tunefleet workers delete {worker_id} --force" in refused.stderr

    rotated = tf("workers", "rotate-token", worker_id)
    assert rotated.exit_code == 0, rotated.output
    assert rotated.stdout.startswith(f"New token for {worker_id}; the old one no longer works.")
    new_token = rotated.stdout.splitlines()[2].strip()
    assert new_token.startswith("wt_") and new_token in rotated.stdout.splitlines()[4]

    agent.stop()  # its token is gone anyway; the worker goes offline
    orchestrator.wait_worker(worker_id, "offline")
    declined = tf("workers", "delete", worker_id, input="n\n")
    assert declined.exit_code == 1
    assert f"Delete worker {worker_id} (drainable, offline)?" in declined.stdout
    assert orchestrator.worker(worker_id)["status"] == "offline"  # still there

    confirmed = tf("workers", "delete", worker_id, input="y\n")
    assert confirmed.exit_code == 0, confirmed.output
    assert f"Deleted worker {worker_id}." in confirmed.stdout
    with pytest.raises(ApiError) as gone:
        orchestrator.worker(worker_id)
    assert gone.value.status == 404


def test_quarantine_and_release_a_live_worker(
    tf: Invoke, orchestrator: Orchestrator, second_agent: tuple[Agent, str]
) -> None:
    _, worker_id = second_agent
    done = tf("workers", "quarantine", worker_id, "--reason", "ECC errors on GPU 0")
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith(f"Quarantined {worker_id} (now idle): ECC errors on GPU 0.")
    assert f"Undo with: tunefleet workers release {worker_id}" in done.stdout
    again = tf("workers", "quarantine", worker_id)
    assert again.exit_code == 1 and "already quarantined" in again.stderr
    listed = tf("workers", "list")
    assert "quarantined" in next(ln for ln in listed.stdout.splitlines() if worker_id in ln)
    shown = tf("workers", "show", worker_id)
    assert "ECC errors on GPU 0" in shown.stdout
    released = tf("workers", "release", worker_id, "--json")
    assert json.loads(released.stdout) == {
        "success": True,
        "worker_id": worker_id,
        "status": "idle",
        "quarantined": False,
        "quarantine_reason": None,
    }
    assert tf("workers", "release", worker_id).exit_code == 1  # 409: not quarantined
    assert orchestrator.worker(worker_id)["quarantined"] is False


def test_delete_of_a_drained_persistent_worker_advises_force_and_force_works(
    tf: Invoke, orchestrator: Orchestrator, second_agent: tuple[Agent, str]
) -> None:
    # Draining never takes a persistent worker offline, so "drain it and wait until it
    # is offline" would wait for ever: the advice is the CLI's own --force, and it works.
    agent, worker_id = second_agent
    assert tf("workers", "drain", worker_id).exit_code == 0
    refused = tf("workers", "delete", worker_id, "--yes")
    assert refused.exit_code == 1
    error = refused.stderr.replace("\n", " ")
    assert f"worker {worker_id} is draining and runs no job" in error
    assert f"delete it with tunefleet workers delete {worker_id} --force" in error
    assert "?force=true" not in error and "(HTTP 409)" in error
    assert orchestrator.worker(worker_id)["status"] == "draining"  # and it stays so

    forced = tf("workers", "delete", worker_id, "--force", "--yes")
    assert forced.exit_code == 0, forced.output
    assert agent.wait_exit() == 0  # told to stop, its agent leaves
    with pytest.raises(ApiError):
        orchestrator.worker(worker_id)


def test_delete_force_json_without_prompt(tf: Invoke, orchestrator: Orchestrator) -> None:
    created = _create(tf, "forced-1")
    result = tf("workers", "delete", created["worker_id"], "--force", "--yes", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["worker_id"] == created["worker_id"]
    assert "Delete worker" not in result.stdout  # --yes: no question asked
