"""A real orchestrator process and a real agent for the Python client's tests, plus a
scripted HTTP server for the answers a healthy orchestrator does not give on demand
(a standby's 503, 429, 500, 507, a web server's HTML, a corrupt artifact)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.e2e.harness import (  # noqa: E402 - needs the path above
    ADMIN_TOKEN,
    Agent,
    Orchestrator,
    write_tiny_config,
)
from tunefleet.client import Client  # noqa: E402


@pytest.fixture(scope="session")
def client_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("client")


@pytest.fixture(scope="session")
def orchestrator(client_root: Path) -> Iterator[Orchestrator]:
    configs = client_root / "configs"
    write_tiny_config(configs, "quick", max_train_steps=20, step_seconds=0.02, log_every=2)
    write_tiny_config(configs, "slow", max_train_steps=3000, step_seconds=0.02)
    write_tiny_config(configs, "broken", max_train_steps=20, step_seconds=0.01, fail_at_step=4)
    # The pipeline example's config: the repository's tiny-example, without the sleeps.
    example = json.loads((Path(_ROOT) / "configs/tiny-example/config.json").read_text())
    write_tiny_config(configs, "tiny-example", **{**example, "step_seconds": 0.0})
    orch = Orchestrator(client_root / "data", configs).start()
    yield orch
    orch.stop()


@pytest.fixture(scope="session")
def agent(orchestrator: Orchestrator, client_root: Path) -> Iterator[str]:
    """One persistent agent running the example trainer; yields its worker id."""
    created = orchestrator.create_worker("client-agent")
    process = Agent(
        orchestrator.url,
        created["token"],
        client_root / "work",
        "client-agent",
        persistent=True,
        extra_args=["--allowed-commands", "python -m tunefleet.examples.tiny_trainer"],
    ).start()
    orchestrator.wait_worker(created["worker_id"], "idle")
    yield created["worker_id"]
    process.stop()


@pytest.fixture
def tf(orchestrator: Orchestrator) -> Iterator[Client]:
    """A client of the orchestrator as admin."""
    with Client(orchestrator.url, token=ADMIN_TOKEN) as client:
        yield client


# --- a scripted server -------------------------------------------------------------------

Answer = tuple[int, dict[str, str], bytes]


@dataclass
class Scripted:
    """Answers each path from ``routes`` (a function of the request headers); records
    every request as (method, path, headers)."""

    url: str
    routes: dict[str, Callable[[dict[str, str]], Answer]] = field(default_factory=dict)
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def json(
        self, path: str, status: int, body: Any, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode()
        answer = (status, {"Content-Type": "application/json", **(headers or {})}, data)
        self.routes[path] = lambda _headers: answer


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    yield from _serve()


@pytest.fixture
def scripted_active() -> Iterator[Scripted]:
    """A second scripted server: the active orchestrator a standby names."""
    yield from _serve()


def _serve() -> Iterator[Scripted]:
    server: ThreadingHTTPServer
    script = Scripted(url="")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            path = self.path.split("?", 1)[0]
            headers = {key: value for key, value in self.headers.items()}
            script.seen.append((self.command, self.path, headers))
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            route = script.routes.get(path)
            status, extra, body = (
                route(headers)
                if route
                else (404, {"Content-Type": "application/json"}, b'{"detail": "Not found"}')
            )
            self.send_response(status)
            for key, value in extra.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    script.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield script
    server.shutdown()
    server.server_close()
