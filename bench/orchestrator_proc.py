"""A real orchestrator process for the benchmarks, and what it costs (from /proc).

The server runs exactly as an operator starts it (``python -m tunefleet server``), with
the open-file limit raised to its hard limit so ten thousand streams fit. PostgreSQL
runs get a fresh schema of their own through libpq's ``options``.

``TUNEFLEET_BENCH_PROFILE=1`` also samples the server with py-spy (the ``bench`` extra)
from start to stop, and saves the collapsed stacks of every thread, CPU samples only, as
``bench/results/profile-<name>.txt`` (flamegraph.pl or speedscope read them).
``TUNEFLEET_BENCH_PROFILE=gil`` samples only the thread holding the GIL (py-spy's
``--gil``): the Python CPU each thread really spends, without the samples of a thread
that waits for the GIL and counts as busy.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

ADMIN_TOKEN = "tf_bench-admin-token-not-a-secret-0123456789abcdef"
PG_DSN = {"host": "127.0.0.1", "port": 5432, "dbname": "test", "user": "postgres"}
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
PROFILE = os.environ.get("TUNEFLEET_BENCH_PROFILE", "") not in ("", "0")
PROFILE_GIL = os.environ.get("TUNEFLEET_BENCH_PROFILE", "") == "gil"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
# TUNEFLEET_BENCH_PROFILE_RATE: more samples a second for a short run (py-spy's cost grows).
PROFILE_RATE_HZ = int(os.environ.get("TUNEFLEET_BENCH_PROFILE_RATE", "") or 250)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def raise_open_file_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def set_open_file_limit(soft: int) -> None:
    """Set this process's soft RLIMIT_NOFILE to ``soft`` (at most its hard limit)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (DB thread included)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def proc_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


@dataclass
class ProcSample:
    """CPU and wall time at one instant; subtract two to get a phase's use."""

    pid: int
    wall: float = field(default_factory=time.monotonic)
    cpu: float = 0.0

    @classmethod
    def take(cls, pid: int) -> ProcSample:
        return cls(pid, time.monotonic(), proc_cpu_s(pid))

    def cpu_since(self, earlier: ProcSample) -> tuple[float, float]:
        """(CPU seconds, CPU share of one core) between two samples."""
        cpu = self.cpu - earlier.cpu
        wall = max(1e-9, self.wall - earlier.wall)
        return cpu, cpu / wall


@dataclass
class Orchestrator:
    data_dir: Path
    database_url: str | None = None
    port: int = field(default_factory=free_port)
    heartbeat_timeout_s: float = 120.0
    extra_args: list[str] = field(default_factory=list)
    # The server's soft open-file limit; None: raised to the hard limit.
    open_file_limit: int | None = None
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0  # time.time() at spawn
    ready_at: float = 0.0  # time.time() when /readyz first said ready
    # With TUNEFLEET_BENCH_PROFILE: bench/results/profile-<profile_name>.txt.
    profile_name: str | None = None
    profiler: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the orchestrator is not running")
        return self.process.pid

    def start(self, timeout_s: float = 60.0, *, standby: bool = False) -> Orchestrator:
        """Spawn it and wait until it is ready; a `standby` only until it answers."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = self.command()
        profiler = self._profiler_command()
        log = (self.data_dir / "server.log").open("ab")
        self.started_at = time.time()
        limit = self.open_file_limit
        set_limit = raise_open_file_limit if limit is None else partial(set_open_file_limit, limit)
        self.process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, preexec_fn=set_limit
        )
        log.close()
        self._start_profiler(profiler)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"orchestrator exited at start: {self.log_tail()}")
            if self.role() == "standby" if standby else self._ready():
                self.ready_at = time.time()
                return self
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"orchestrator not ready within {timeout_s:g} s: {self.log_tail()}")

    def command(self) -> list[str]:
        """The server's command line: ``python -m tunefleet server`` with its flags."""
        args = [
            sys.executable,
            "-m",
            "tunefleet",
            "server",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--configs-dir",
            str(self.data_dir / "configs"),
            "--heartbeat-timeout",
            str(self.heartbeat_timeout_s),
            "--admin-token",
            ADMIN_TOKEN,
            "--no-local-runner",
            # Every simulated worker connects from loopback: hundreds of streams and
            # heartbeat connections from one address, past the default cap.
            "--max-connections-per-address",
            "0",
            *self.extra_args,
        ]
        if self.database_url:
            args += ["--database-url", self.database_url]
        return args

    def _profiler_command(self) -> list[str] | None:
        """py-spy's command line but the pid; None when not profiling. Checked before the
        server starts, so a missing py-spy leaves no server behind."""
        if not (PROFILE and self.profile_name):
            return None
        py_spy = Path(sys.executable).with_name("py-spy")
        if not py_spy.exists():
            raise RuntimeError("TUNEFLEET_BENCH_PROFILE needs py-spy: pip install -e '.[bench]'")
        RESULTS_DIR.mkdir(exist_ok=True)
        out = RESULTS_DIR / f"profile-{self.profile_name}.txt"
        rate = str(PROFILE_RATE_HZ)
        # --threads: the event loop apart from the database and audit threads.
        output = str(out)
        gil = ["--gil"] if PROFILE_GIL else []
        return [str(py_spy), "record", "--format", "raw", "--threads", *gil,
                "--rate", rate, "-o", output]  # fmt: skip

    def _start_profiler(self, command: list[str] | None) -> None:
        if command is None or self.process is None:
            return
        self.profiler = subprocess.Popen(
            [*command, "--pid", str(self.process.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _stop_profiler(self) -> None:
        """py-spy writes its file when the server has exited (or on SIGINT)."""
        if self.profiler is None:
            return
        try:
            self.profiler.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.profiler.send_signal(signal.SIGINT)
            self.profiler.wait(timeout=30)
        self.profiler = None

    def _ready(self) -> bool:
        url = f"http://127.0.0.1:{self.port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(json.loads(resp.read()).get("status") == "ready")
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def role(self) -> str | None:
        """What /healthz says: active or standby (None: no answer)."""
        url = f"http://127.0.0.1:{self.port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return json.loads(resp.read()).get("role")  # type: ignore[no-any-return]
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def sample(self) -> ProcSample:
        return ProcSample.take(self.pid)

    def rss_bytes(self) -> int:
        return proc_rss_bytes(self.pid)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed beyond what was committed."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        self._stop_profiler()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._stop_profiler()

    def log_tail(self, n_chars: int = 3000) -> str:
        path = self.data_dir / "server.log"
        return path.read_text(errors="replace")[-n_chars:] if path.exists() else ""


class MinimalServer(Orchestrator):
    """bench/minimal_server.py, the yardstick, run as a process like the orchestrator
    (SQLite only: ``database_url`` is ignored)."""

    records = "minimal"  # its --records: what it stores per change of a job

    def command(self) -> list[str]:
        # Run as a file, so it starts from any working directory (it imports no bench code).
        script = Path(__file__).resolve().parent / "minimal_server.py"
        db = self.data_dir / "minimal.db"
        return [sys.executable, str(script), "--port", str(self.port), "--db", str(db),
                "--admin-token", ADMIN_TOKEN, "--records", self.records]  # fmt: skip


class MinimalServerWithRows(MinimalServer):
    """The yardstick storing the rows tunefleet stores per job cycle (``--records
    tunefleet``): what those rows cost on the minimal server's own stack."""

    records = "tunefleet"


def postgres_available() -> bool:
    try:
        import psycopg2  # type: ignore[import-untyped]
    except ImportError:
        return False
    try:
        psycopg2.connect(connect_timeout=2, **PG_DSN).close()
    except psycopg2.Error:
        return False
    return True


@contextlib.contextmanager
def postgres_schema() -> Iterator[str]:
    """A fresh schema for one run; the database URL that selects it. Dropped afterwards."""
    import psycopg2

    schema = f"bench_{secrets.token_hex(4)}"
    conn = psycopg2.connect(**PG_DSN)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f'CREATE SCHEMA "{schema}"')
        # libpq options, URL-encoded: "-csearch_path=<schema>"
        yield (
            f"postgresql://{PG_DSN['user']}@{PG_DSN['host']}:{PG_DSN['port']}/{PG_DSN['dbname']}"
            f"?options=-csearch_path%3D{schema}"
        )
    finally:
        with conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.close()
