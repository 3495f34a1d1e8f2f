"""`tunefleet worker`: options, environment variables, and the messages a user sees."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from agent_loop_testkit import ProtocolServer
from click.testing import CliRunner, Result

from tunefleet.agent.settings import DEFAULT_EPHEMERAL_RECONNECT_TIMEOUT_S, AgentSettings
from tunefleet.cli import worker as worker_cli

URL = "http://127.0.0.1:8001"
TOKEN = "wt_cli_token_0123456789"

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def no_logging_setup(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The command configures process-wide logging; tests must not keep that."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(worker_cli, "configure_logging", lambda *args: calls.append(args))
    return calls


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[AgentSettings]:
    """Replace the agent with a recorder of the settings it would run with."""
    seen: list[AgentSettings] = []

    async def fake_run_worker(settings: AgentSettings) -> None:
        seen.append(settings)

    monkeypatch.setattr(worker_cli, "run_worker", fake_run_worker)
    return seen


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    clean: dict[str, str | None] = {name: None for name in _ALL_ENV}
    clean.update(env or {})
    return CliRunner().invoke(worker_cli.worker, list(args), env=clean)


_ALL_ENV = (
    "SIMPLETUNER_ORCHESTRATOR_URL",
    "SIMPLETUNER_WORKER_TOKEN",
    "SIMPLETUNER_WORKER_NAME",
    "SIMPLETUNER_WORKER_PERSISTENT",
    "SIMPLETUNER_HEARTBEAT_INTERVAL",
    "TUNEFLEET_WORKER_LABELS",
    "TUNEFLEET_WORK_DIR",
    "TUNEFLEET_TRAIN_COMMAND",
    "TUNEFLEET_CA_CERT",
    "TUNEFLEET_SSL_NO_VERIFY",
    "TUNEFLEET_STREAM_TIMEOUT",
    "TUNEFLEET_RECONNECT_TIMEOUT",
)


def test_missing_url_exits_2_saying_what_to_pass(captured: list[AgentSettings]) -> None:
    result = invoke("--worker-token", TOKEN)
    assert result.exit_code == 2
    assert "Missing the orchestrator URL" in result.output
    assert "--orchestrator-url" in result.output
    assert "SIMPLETUNER_ORCHESTRATOR_URL" in result.output
    assert captured == []


def test_missing_token_exits_2_saying_what_to_pass(captured: list[AgentSettings]) -> None:
    result = invoke("--orchestrator-url", URL, "--worker-token", "   ")
    assert result.exit_code == 2
    assert "Missing the worker token" in result.output
    assert "SIMPLETUNER_WORKER_TOKEN" in result.output
    assert captured == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--orchestrator-url", "orchestrator:8001"), "must start with http:// or https://"),
        (("--labels", "no-equals-sign"), "is not key=value"),
        (("--ssl-no-verify", "--ca-cert", __file__), "contradict each other"),
        (("--train-command", "python 'unclosed"), "cannot be parsed"),
        (("--allowed-commands", "sh ** -c"), "** may only be the last word"),
        (("--allowed-commands", "sh 'x"), "cannot be split"),
    ],
)
def test_malformed_options_exit_2(
    captured: list[AgentSettings], args: tuple[str, ...], message: str
) -> None:
    base = ("--orchestrator-url", URL, "--worker-token", TOKEN)
    result = invoke(*base, *args)
    assert result.exit_code == 2
    assert message in result.output
    assert captured == []


def test_options_reach_the_settings(captured: list[AgentSettings], tmp_path: Path) -> None:
    result = invoke(
        "--orchestrator-url",
        URL + "/",
        "--worker-token",
        f" {TOKEN}\n",
        "--name",
        "gpu-7",
        "--persistent",
        "--labels",
        "gpu_type=a100",
        "--labels",
        "zone=eu, rack=4",
        "--work-dir",
        str(tmp_path),
        "--train-command",
        "python train.py --fast",
        "--allowed-commands",
        "python train.py **",
        "--allowed-commands",
        "bash /opt/*.sh",
        "--heartbeat-interval",
        "5",
        "--stream-timeout",
        "20",
        "-v",
    )
    assert result.exit_code == 0, result.output
    (settings,) = captured
    assert settings.orchestrator_url == URL
    assert settings.worker_token == TOKEN
    assert "whitespace" in result.output  # the stripped token is mentioned
    assert (settings.name, settings.persistent) == ("gpu-7", True)
    assert settings.labels == {"gpu_type": "a100", "zone": "eu", "rack": "4"}
    assert settings.work_dir == tmp_path
    assert settings.train_command == ("python", "train.py", "--fast")
    assert settings.allowed_commands == ("python train.py **", "bash /opt/*.sh")
    assert (settings.heartbeat_interval_s, settings.stream_timeout_s) == (5.0, 20.0)
    assert settings.reconnect_timeout_s is None  # persistent: reconnect forever


def test_environment_variables_are_honoured(
    captured: list[AgentSettings], no_logging_setup: list[tuple[Any, ...]]
) -> None:
    env = {
        "SIMPLETUNER_ORCHESTRATOR_URL": URL,
        "SIMPLETUNER_WORKER_TOKEN": TOKEN,
        "SIMPLETUNER_WORKER_NAME": "from-env",
        "SIMPLETUNER_WORKER_PERSISTENT": "true",
        "SIMPLETUNER_HEARTBEAT_INTERVAL": "12.5",
        "TUNEFLEET_WORKER_LABELS": "team=nlp gpu_type=h100",
        "TUNEFLEET_TRAIN_COMMAND": "bash run.sh",
        "TUNEFLEET_RECONNECT_TIMEOUT": "60",
    }
    result = invoke("--verbose", env=env)
    assert result.exit_code == 0, result.output
    (settings,) = captured
    assert (settings.orchestrator_url, settings.worker_token) == (URL, TOKEN)
    assert (settings.name, settings.persistent) == ("from-env", True)
    assert settings.heartbeat_interval_s == 12.5
    assert settings.labels == {"team": "nlp", "gpu_type": "h100"}
    assert settings.train_command == ("bash", "run.sh")
    # Without --allowed-commands: the train command and the known trainers.
    assert settings.allowed_commands == (
        "bash run.sh",
        "python -m simpletuner.train",
        "python -m tunefleet.examples.tiny_trainer",
    )
    assert settings.reconnect_timeout_s == 60.0
    assert no_logging_setup == [("console", True)]


def test_defaults_ephemeral_and_host_name(captured: list[AgentSettings]) -> None:
    env = {"SIMPLETUNER_ORCHESTRATOR_URL": URL, "SIMPLETUNER_WORKER_TOKEN": TOKEN}
    assert invoke(env={**env, "SIMPLETUNER_WORKER_PERSISTENT": "false"}).exit_code == 0
    (settings,) = captured
    assert settings.persistent is False
    assert settings.name == socket.gethostname()
    assert settings.reconnect_timeout_s == DEFAULT_EPHEMERAL_RECONNECT_TIMEOUT_S
    assert settings.heartbeat_interval_s == 30.0
    assert settings.train_command == ("python", "-m", "simpletuner.train")


def test_ssl_no_verify_says_it_is_for_development(captured: list[AgentSettings]) -> None:
    result = invoke(
        "--orchestrator-url", "https://10.0.0.5:8001", "--worker-token", TOKEN, "--ssl-no-verify"
    )
    assert result.exit_code == 0
    assert "--ssl-no-verify" in result.output and "development only" in result.output
    assert captured[0].ssl_no_verify is True


def test_plain_http_to_a_remote_host_warns_about_the_token(captured: list[AgentSettings]) -> None:
    remote = invoke("--orchestrator-url", "http://10.0.0.5:8001", "--worker-token", TOKEN)
    local = invoke("--orchestrator-url", URL, "--worker-token", TOKEN)
    assert "unencrypted" in remote.output
    assert "unencrypted" not in local.output


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_connection_refused_exits_1_with_what_to_check(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    result = invoke(
        "--orchestrator-url",
        url,
        "--worker-token",
        TOKEN,
        "--work-dir",
        str(tmp_path),
        "--reconnect-timeout",
        "0",
    )
    assert result.exit_code == 1
    assert f"Error: Connection refused by {url}" in result.output
    for hint in ("URL and port", "firewall", "--host 0.0.0.0"):
        assert hint in result.output


async def test_invalid_token_exits_1_with_the_invalid_token_message(
    aiohttp_server: Any, tmp_path: Path
) -> None:
    server = await aiohttp_server(ProtocolServer().app())
    args = [
        "--orchestrator-url",
        str(server.make_url("")).rstrip("/"),
        "--worker-token",
        "wt_rotated_long_ago_000",
        "--work-dir",
        str(tmp_path),
    ]
    # The command runs its own event loop, so it runs in a thread beside this one.
    result = await asyncio.to_thread(invoke, *args)
    assert result.exit_code == 1
    assert "Error: Invalid token" in result.output
    assert "rotated" in result.output and "whitespace" in result.output
