"""The worker agent's settings: command-line options and environment variables, checked.

The seed's variables (SIMPLETUNER_*) work unchanged; tunefleet's own additions are
TUNEFLEET_*. A setting a user can get wrong is refused here with a message that says
what to pass, before anything connects.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tunefleet.commands import BadPattern, default_patterns, parse_patterns
from tunefleet.errors import TunefleetError

ENV_URL = "SIMPLETUNER_ORCHESTRATOR_URL"
ENV_TOKEN = "SIMPLETUNER_WORKER_TOKEN"
ENV_NAME = "SIMPLETUNER_WORKER_NAME"
ENV_PERSISTENT = "SIMPLETUNER_WORKER_PERSISTENT"
ENV_HEARTBEAT_INTERVAL = "SIMPLETUNER_HEARTBEAT_INTERVAL"
ENV_LABELS = "TUNEFLEET_WORKER_LABELS"
ENV_WORK_DIR = "TUNEFLEET_WORK_DIR"
ENV_TRAIN_COMMAND = "TUNEFLEET_TRAIN_COMMAND"
ENV_CA_CERT = "TUNEFLEET_CA_CERT"
ENV_SSL_NO_VERIFY = "TUNEFLEET_SSL_NO_VERIFY"
ENV_STREAM_TIMEOUT = "TUNEFLEET_STREAM_TIMEOUT"
ENV_RECONNECT_TIMEOUT = "TUNEFLEET_RECONNECT_TIMEOUT"
ENV_LOG_FORMAT = "TUNEFLEET_LOG_FORMAT"

DEFAULT_WORK_DIR = Path.home() / ".tunefleet" / "work"
# A leading "python" runs as the agent's own interpreter (the executor's rule).
DEFAULT_TRAIN_COMMAND: tuple[str, ...] = ("python", "-m", "simpletuner.train")
DEFAULT_HEARTBEAT_INTERVAL_S = 30.0
# The orchestrator pings at least every 30 s: two missed pings and some slack.
DEFAULT_STREAM_TIMEOUT_S = 75.0
# An ephemeral (cloud) worker that cannot reach its orchestrator stops costing money.
DEFAULT_EPHEMERAL_RECONNECT_TIMEOUT_S = 300.0

SSL_NO_VERIFY_WARNING = (
    "WARNING: --ssl-no-verify turns off TLS certificate verification. Use it for "
    "development only: anyone on the network path can impersonate the orchestrator and "
    "read the worker token. Prefer --ca-cert with a copy of the orchestrator's certificate "
    "(a `tunefleet server --ssl` prints its path at start: <data-dir>/tls/cert.pem)."
)


class SettingsError(TunefleetError):
    """A setting is missing or malformed; the message says what to pass."""

    status = 400


@dataclass(frozen=True, slots=True)
class AgentSettings:
    orchestrator_url: str
    worker_token: str
    name: str
    persistent: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    work_dir: Path = DEFAULT_WORK_DIR
    train_command: tuple[str, ...] = DEFAULT_TRAIN_COMMAND
    # The programs this agent runs (globs, tunefleet/commands.py); None: any. The command
    # line always sets it (default: the train command and SimpleTuner's trainer).
    allowed_commands: tuple[str, ...] | None = None
    ssl_no_verify: bool = False
    ca_cert: Path | None = None
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    stream_timeout_s: float = DEFAULT_STREAM_TIMEOUT_S
    # None: reconnect forever. Counted while no job runs; a running job is never given up.
    reconnect_timeout_s: float | None = None
    # Not given: the default of the worker type in force, which the orchestrator may
    # change from --persistent's (agent/identity.py).
    reconnect_timeout_by_type: bool = False
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    request_timeout_s: float = 30.0
    # How long a stop may take: the job's graceful end, the last reports, disconnect.
    stop_timeout_s: float = 30.0
    hostname: str = field(default_factory=socket.gethostname)
    # Several orchestrators (one active, the others standing by): the agent moves to the
    # next one on 503 or a lost connection. Empty: just orchestrator_url.
    orchestrator_urls: tuple[str, ...] = ()

    @property
    def urls(self) -> tuple[str, ...]:
        return self.orchestrator_urls or (self.orchestrator_url,)

    @property
    def verify_tls(self) -> bool:
        return not self.ssl_no_verify


def resolve_settings(
    *,
    orchestrator_url: str | None,
    worker_token: str | None,
    name: str | None = None,
    persistent: bool = False,
    labels: Iterable[str] = (),
    work_dir: Path | None = None,
    train_command: str | None = None,
    allowed_commands: Iterable[str] = (),
    ssl_no_verify: bool = False,
    ca_cert: Path | None = None,
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
    stream_timeout_s: float = DEFAULT_STREAM_TIMEOUT_S,
    reconnect_timeout_s: float | None = None,
) -> tuple[AgentSettings, list[str]]:
    """Check raw option values; return the settings and warnings the user should see.

    Raises SettingsError (the command line turns it into exit code 2).
    """
    warnings: list[str] = []
    urls = _orchestrator_urls(orchestrator_url)
    url = urls[0]
    token = (worker_token or "").strip()
    if not token:
        raise SettingsError(
            f"Missing the worker token: pass --worker-token or set {ENV_TOKEN} "
            "(an administrator creates one with POST /api/admin/workers)."
        )
    if token != worker_token:
        warnings.append("The worker token had leading or trailing whitespace; it was removed.")
    if ssl_no_verify and ca_cert is not None:
        raise SettingsError("--ssl-no-verify and --ca-cert contradict each other; pass one.")
    if ssl_no_verify:
        warnings.append(SSL_NO_VERIFY_WARNING)
    for each in urls:
        if each.startswith("http://") and not _is_loopback(each):
            warnings.append(
                f"The worker token travels unencrypted to {each}; use https:// "
                "(tunefleet server --ssl, or TLS at a reverse proxy) outside a trusted network."
            )
    if heartbeat_interval_s <= 0 or stream_timeout_s <= 0:
        raise SettingsError("--heartbeat-interval and --stream-timeout must be positive.")
    if reconnect_timeout_s is not None and reconnect_timeout_s < 0:
        raise SettingsError("--reconnect-timeout cannot be negative.")
    by_type = reconnect_timeout_s is None
    if reconnect_timeout_s is None and not persistent:
        reconnect_timeout_s = DEFAULT_EPHEMERAL_RECONNECT_TIMEOUT_S
    command = _train_command(train_command)
    settings = AgentSettings(
        orchestrator_url=url,
        orchestrator_urls=urls if len(urls) > 1 else (),
        worker_token=token,
        name=(name or "").strip() or socket.gethostname(),
        persistent=persistent,
        labels=parse_labels(labels),
        # Absolute once, here: a job runs in its own directory, where a relative
        # --work-dir would name some other place.
        work_dir=_absolute(work_dir or DEFAULT_WORK_DIR),
        train_command=command,
        allowed_commands=_allowed_commands(allowed_commands, command),
        ssl_no_verify=ssl_no_verify,
        ca_cert=_absolute(ca_cert) if ca_cert is not None else None,
        heartbeat_interval_s=heartbeat_interval_s,
        stream_timeout_s=stream_timeout_s,
        reconnect_timeout_s=reconnect_timeout_s,
        reconnect_timeout_by_type=by_type,
    )
    return settings, warnings


def parse_labels(values: Iterable[str]) -> dict[str, str]:
    """``key=value`` pairs, each value possibly holding several separated by commas."""
    labels: dict[str, str] = {}
    for value in values:
        for pair in value.split(","):
            pair = pair.strip()
            if not pair:
                continue
            key, equals, label = pair.partition("=")
            if not equals or not key.strip():
                raise SettingsError(
                    f"Label {pair!r} is not key=value (e.g. --labels gpu_type=a100)."
                )
            labels[key.strip()] = label.strip()
    return labels


def _orchestrator_urls(raw: str | None) -> tuple[str, ...]:
    """One URL, or several separated by commas (orchestrators standing by for each other)."""
    parts = [part.strip() for part in (raw or "").split(",")]
    if len(parts) > 1 and not all(parts):
        raise SettingsError(
            f"The orchestrator URL list {raw!r} has an empty entry: separate URLs with "
            "single commas (e.g. https://orch-a:8001,https://orch-b:8001)."
        )
    urls = tuple(_orchestrator_url(part) for part in parts)
    if len(set(urls)) != len(urls):
        raise SettingsError(f"The orchestrator URL list {raw!r} names a URL twice.")
    return urls


def _orchestrator_url(raw: str | None) -> str:
    url = (raw or "").strip().rstrip("/")
    if not url:
        raise SettingsError(
            f"Missing the orchestrator URL: pass --orchestrator-url or set {ENV_URL} "
            "(e.g. https://orchestrator.example.com:8001)."
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SettingsError(
            f"The orchestrator URL {url!r} must start with http:// or https:// and name a "
            "host (e.g. https://orchestrator.example.com:8001)."
        )
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError as error:
        raise SettingsError(f"The orchestrator URL {url!r} has a bad port: {error}.") from error
    return url


def _train_command(raw: str | None) -> tuple[str, ...]:
    if raw is None or not raw.strip():
        return DEFAULT_TRAIN_COMMAND
    try:
        return tuple(shlex.split(raw))
    except ValueError as error:
        raise SettingsError(f"--train-command {raw!r} cannot be parsed: {error}.") from error


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path.expanduser()))


def _allowed_commands(raw: Iterable[str], train_command: tuple[str, ...]) -> tuple[str, ...]:
    values = [v for v in raw if v.strip()]
    if not values:
        return default_patterns(train_command)
    try:
        return parse_patterns(values)
    except BadPattern as error:
        raise SettingsError(f"--allowed-commands: {error}.") from error


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
