"""`tunefleet server --ssl` serves TLS 1.2 and 1.3 only, and the agent
(`python -m tunefleet worker`) verifies the orchestrator's certificate unless told not to.

The old protocol versions are offered by a client that is itself willing to speak them
(security level 0), and a control handshake against a permissive local server proves
it can: so a refusal is the orchestrator's, not this machine's OpenSSL policy."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import ADMIN_TOKEN, TUNEFLEET, ApiError, Orchestrator, wait_until
from tunefleet.http.tls import ensure_self_signed

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(120),
    # Offering TLS 1.0 and 1.1 is the point of two tests here.
    pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning"),
]
OLD_VERSIONS = [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1]
CURRENT_VERSIONS = [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]
AGENT_TIMEOUT_S = 30.0


@dataclass
class TlsOrchestrator(Orchestrator):
    """The harness's orchestrator started with --ssl; the test's own calls skip
    verification (they are not what is under test)."""

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def cert(self) -> Path:
        return self.data_dir / "tls" / "cert.pem"

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, token: str | None = None
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if path.startswith("/api/"):
            request.add_header("Authorization", f"Bearer {token or ADMIN_TOKEN}")
        context = ssl._create_unverified_context()
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            raise ApiError(error.code, json.loads(error.read() or b"{}")) from None


@pytest.fixture(scope="module")
def orch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsOrchestrator]:
    root = tmp_path_factory.mktemp("tls")
    (root / "configs").mkdir()
    server = TlsOrchestrator(root / "data", root / "configs", extra_args=["--ssl"])
    server.heartbeat_timeout_s = 30.0
    server.start()
    yield server
    server.stop()


def client_context(version: ssl.TLSVersion) -> ssl.SSLContext:
    """A client pinned to one protocol version, willing to use it whatever its age."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = context.maximum_version = version
    if version in OLD_VERSIONS:
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
    return context


def handshake(port: int, version: ssl.TLSVersion) -> str:
    """The negotiated version, or ssl.SSLError."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        client_context(version).wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return str(tls.version())


@pytest.fixture(scope="module")
def permissive_port(orch: TlsOrchestrator) -> Iterator[int]:
    """A local TLS server that accepts every version, for the control handshakes."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.load_cert_chain(orch.cert, orch.data_dir / "tls" / "key.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                with context.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join(timeout=5)
    listener.close()


@pytest.mark.parametrize("version", CURRENT_VERSIONS, ids=lambda v: v.name)
def test_tls_1_2_and_1_3_handshakes_succeed(orch: TlsOrchestrator, version: ssl.TLSVersion) -> None:
    expected = {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
    assert handshake(orch.port, version) == expected


@pytest.mark.parametrize("version", OLD_VERSIONS, ids=lambda v: v.name)
def test_tls_1_0_and_1_1_handshakes_fail(
    orch: TlsOrchestrator, permissive_port: int, version: ssl.TLSVersion
) -> None:
    try:
        handshake(permissive_port, version)
    except ssl.SSLError as error:
        pytest.skip(f"this machine's OpenSSL cannot speak {version.name} at all: {error}")
    with pytest.raises(ssl.SSLError) as refused:
        handshake(orch.port, version)
    # The server hung up (or alerted); it was not a client with nothing to offer.
    assert "NO_PROTOCOLS_AVAILABLE" not in str(refused.value).upper(), refused.value


# --- the agent ---------------------------------------------------------------------------


@dataclass
class AgentRun:
    process: subprocess.Popen[bytes]
    log: Path
    worker_id: str

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def exit_code(self) -> int:
        try:
            return self.process.wait(timeout=AGENT_TIMEOUT_S)
        finally:
            self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def run_agent(orch: TlsOrchestrator, tmp_path: Path, name: str, *tls_args: str) -> AgentRun:
    """`tunefleet worker` against the TLS orchestrator, token from the environment."""
    created = orch.request("POST", "/api/admin/workers", {"name": name})
    log = tmp_path / f"agent-{name}.log"
    args = [*TUNEFLEET, "worker", "--orchestrator-url", orch.url, "--name", name]
    args += ["--persistent", "--work-dir", str(tmp_path / name), "--reconnect-timeout", "5"]
    env = {**os.environ, "SIMPLETUNER_WORKER_TOKEN": created["token"]}
    for variable in ("TUNEFLEET_CA_CERT", "TUNEFLEET_SSL_NO_VERIFY", "SSL_CERT_FILE"):
        env.pop(variable, None)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*args, *tls_args], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    return AgentRun(process, log, created["worker_id"])


def wait_connected(orch: TlsOrchestrator, agent: AgentRun) -> None:
    def connected() -> bool:
        if agent.process.poll() is not None:
            raise AssertionError(f"agent exited {agent.process.returncode}: {agent.output()}")
        view = orch.request("GET", f"/api/admin/workers/{agent.worker_id}")
        return bool(view["status"] == "idle" and view["connected"])

    try:
        wait_until(connected, timeout_s=AGENT_TIMEOUT_S, what=f"{agent.worker_id} over TLS")
    finally:
        agent.stop()


def test_agent_refuses_the_self_signed_certificate_without_the_ca(
    orch: TlsOrchestrator, tmp_path: Path
) -> None:
    agent = run_agent(orch, tmp_path, "unverified")
    assert agent.exit_code() == 1
    output = agent.output()
    assert "certificate verify failed" in output.lower(), output
    assert "--ssl-no-verify" in output and "--ca-cert" in output, output
    view = orch.request("GET", f"/api/admin/workers/{agent.worker_id}")
    assert view["status"] == "connecting"  # it never got as far as registering


def test_agent_refuses_a_certificate_its_ca_did_not_sign(
    orch: TlsOrchestrator, tmp_path: Path
) -> None:
    other_ca = ensure_self_signed(tmp_path / "other-ca", ["127.0.0.1"]).cert
    agent = run_agent(orch, tmp_path, "wrong-ca", "--ca-cert", str(other_ca))
    assert agent.exit_code() == 1
    assert "certificate verify failed" in agent.output().lower()


def test_agent_trusts_the_orchestrators_certificate_given_as_ca(
    orch: TlsOrchestrator, tmp_path: Path
) -> None:
    agent = run_agent(orch, tmp_path, "trusting", "--ca-cert", str(orch.cert))
    wait_connected(orch, agent)
    assert "--ssl-no-verify" not in agent.output()


def test_agent_with_ssl_no_verify_connects_and_warns(orch: TlsOrchestrator, tmp_path: Path) -> None:
    agent = run_agent(orch, tmp_path, "reckless", "--ssl-no-verify")
    wait_connected(orch, agent)
    output = agent.output()
    assert "WARNING: --ssl-no-verify" in output and "development" in output, output


def test_the_agents_tls_error_names_the_ca_file_it_was_given(
    orch: TlsOrchestrator, tmp_path: Path
) -> None:
    other_ca = ensure_self_signed(tmp_path / "other-ca", ["127.0.0.1"]).cert
    agent = run_agent(orch, tmp_path, "named-ca", "--ca-cert", str(other_ca))
    assert agent.exit_code() == 1
    output = agent.output()
    assert f"The certificate given with --ca-cert, {other_ca}, is not the one" in output
    assert "/path/to/ca.pem" not in output


# --- what the orchestrator prints and answers ---------------------------------------------


def banner_commands(orch: TlsOrchestrator) -> list[str]:
    """The first-start banner's commands, continuation lines joined."""
    assert orch.log_path is not None
    text = orch.log_path.read_text(errors="replace").replace("\\\n", " ")
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip().startswith(("curl ", "tunefleet worker"))
    ]


def test_the_printed_commands_trust_the_real_certificate_and_work(
    orch: TlsOrchestrator, tmp_path: Path
) -> None:
    create, connect, submit = banner_commands(orch)
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    cert = str(orch.cert)
    assert create.startswith(f"curl -sS --cacert {cert} -X POST {orch.url}/api/admin/workers")
    assert connect.endswith(f"--persistent --ca-cert {cert}")
    env = {**os.environ, "ADMIN_TOKEN": ADMIN_TOKEN}
    created = subprocess.run(
        ["bash", "-c", create], env=env, capture_output=True, text=True, timeout=30
    )
    assert created.returncode == 0, created.stderr  # curl exit 60 before: no trust
    worker = json.loads(created.stdout)
    # The API's command for the worker names the same file, and it connects.
    assert f"--ca-cert {cert}" in worker["connection_command"]
    assert worker["environment"]["TUNEFLEET_CA_CERT"] == cert
    args = shlex.split(worker["connection_command"])
    assert args[:2] == ["tunefleet", "worker"]
    log = tmp_path / "printed-agent.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*TUNEFLEET, *args[1:], "--work-dir", str(tmp_path / "work")],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_connected(orch, AgentRun(process, log, worker["worker_id"]))
    submitted = subprocess.run(
        ["bash", "-c", submit], env=env, capture_output=True, text=True, timeout=30
    )
    assert submitted.returncode == 0, submitted.stderr
    assert "detail" in json.loads(submitted.stdout) or json.loads(submitted.stdout)["success"]
