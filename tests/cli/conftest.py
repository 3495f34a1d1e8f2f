"""One real orchestrator process (and one real agent) shared by the command-line tests.

Starting processes is the slow part, so they live for the whole session; each test
uses its own names (workers, tokens) so tests do not depend on each other.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.e2e.harness import (  # noqa: E402 - needs the path above
    ADMIN_TOKEN,
    Agent,
    Orchestrator,
    write_tiny_config,
)
from tunefleet.cli.main import cli  # noqa: E402

POOL = {"pool": "cli"}  # the shared agent's label; follow tests select it
Invoke = Callable[..., Result]


@pytest.fixture(scope="session")
def cli_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="session")
def orchestrator(cli_root: Path) -> Iterator[Orchestrator]:
    configs = cli_root / "configs"
    write_tiny_config(configs, "quick", max_train_steps=10, step_seconds=0.02)
    write_tiny_config(configs, "slow", max_train_steps=1500, step_seconds=0.02)
    write_tiny_config(configs, "broken", max_train_steps=20, step_seconds=0.02, fail_at_step=4)
    orch = Orchestrator(cli_root / "data", configs).start()
    yield orch
    orch.stop()


@pytest.fixture(scope="session")
def agent(orchestrator: Orchestrator, cli_root: Path) -> Iterator[str]:
    """A persistent agent labelled pool=cli; yields its worker id. Besides the example
    trainer it runs inline Python scripts (the artifact tests' uploader)."""
    created = orchestrator.create_worker("cli-agent", labels=POOL)
    process = Agent(
        orchestrator.url,
        created["token"],
        cli_root / "work",
        "cli-agent",
        persistent=True,
        extra_args=[
            "--allowed-commands",
            "python -m tunefleet.examples.tiny_trainer",
            "--allowed-commands",
            f"{sys.executable} -c **",
        ],
    ).start()
    orchestrator.wait_worker(created["worker_id"], "idle")
    yield created["worker_id"]
    process.stop()


def _invoke(url: str, token: str | None, args: tuple[str, ...], input: str | None) -> Result:
    env: dict[str, str | None] = {
        "TUNEFLEET_URL": url,
        "TUNEFLEET_TOKEN": token,
        "TUNEFLEET_CA_CERT": None,
        "TUNEFLEET_SSL_NO_VERIFY": None,
        "COLUMNS": None,
    }
    return CliRunner(env=env).invoke(cli, list(args), input=input, catch_exceptions=False)


@pytest.fixture
def tf(orchestrator: Orchestrator) -> Invoke:
    """``tf("workers", "list")`` runs the command against the orchestrator as admin;
    ``token=`` and ``url=`` override, ``input=`` answers prompts."""

    def run(
        *args: str, token: str | None = ADMIN_TOKEN, url: str | None = None, input: Any = None
    ) -> Result:
        return _invoke(url or orchestrator.url, token, args, input)

    return run
