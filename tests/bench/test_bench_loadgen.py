"""The benchmarks' load generator speaks the real protocol: against a real orchestrator
process, three simulated workers register, hold their streams, heartbeat, and take,
acknowledge and complete jobs. Plus its wire-level parsers, in pieces."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench import orchestrator_proc  # noqa: E402
from bench.fleet_common import percentile  # noqa: E402
from bench.loadgen import LoadGenError, LoadGenProcess  # noqa: E402
from bench.loadgen_http import (  # noqa: E402
    ChunkDecoder,
    HttpConnection,
    HttpError,
    HttpPool,
    build_request,
    parse_head,
)
from bench.orchestrator_proc import Orchestrator  # noqa: E402


@pytest.fixture
def generator(tmp_path: Path) -> Iterator[tuple[Orchestrator, LoadGenProcess]]:
    server = Orchestrator(tmp_path / "server").start(timeout_s=30)
    gen = LoadGenProcess(server.port, server.pid, tmp_path / "loadgen.log", pool=4).start()
    try:
        yield server, gen
    finally:
        gen.close()
        server.stop()


@pytest.mark.e2e
def test_three_workers_take_jobs_and_heartbeat_over_the_real_protocol(
    generator: tuple[Orchestrator, LoadGenProcess],
) -> None:
    server, gen = generator
    # A failing command is raised in the parent, and the process goes on answering.
    with pytest.raises(LoadGenError, match="no registered workers"):
        gen.call("heartbeats", duration_s=0.1, concurrency=1, timeout_s=20)
    with pytest.raises(LoadGenError, match="on_job must be"):
        gen.call("set_mode", on_job="sometimes")

    assert gen.call("create_workers", count=3, timeout_s=20)["result"]["workers"] == 3
    gen.call("register", timeout_s=20)
    assert gen.call("open_streams", timeout_s=20)["result"]["streams"] == 3
    gen.call("set_mode", on_job="complete")

    reply = gen.call("dispatch", samples=3, gap_s=0.05, timeout_s=30)
    latencies = reply["result"]["latencies_ms"]
    assert len(latencies) == 3 and all(0 < ms < 10_000 for ms in latencies)
    # The CPU of both processes is measured around every command (three dispatches may
    # take less than the kernel's 10 ms tick of the server's CPU: counted, maybe as 0).
    assert reply["server_cpu_s"] >= 0 and reply["server_rss"] > 0
    assert reply["loadgen_cpu_s"] > 0

    reply = gen.call("heartbeats", duration_s=0.3, concurrency=2, timeout_s=20)
    beats = reply["result"]
    assert beats["done"] > 0 and set(beats["statuses"]) == {"200"}
    assert reply["server_cpu_s"] > 0  # 0.3 s of heartbeats: many ticks

    status = gen.call("status")["result"]
    assert status["streams"] == 3 and status["errors"] == {}
    # The orchestrator saw what the load generator did: three jobs completed.
    jobs = server_jobs(server)
    assert [job["status"] for job in jobs] == ["completed"] * 3


def server_jobs(server: Orchestrator) -> list[dict[str, object]]:
    import json
    import urllib.request

    from bench.orchestrator_proc import ADMIN_TOKEN

    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/api/queue")
    req.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return list(json.loads(resp.read())["jobs"])


def test_chunk_decoder_handles_any_split() -> None:
    body = b"5\r\nhello\r\n1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\n\r\n"
    for cut in range(1, len(body)):
        decoder = ChunkDecoder()
        out = decoder.feed(body[:cut]) + decoder.feed(body[cut:])
        assert out == b"hello world!" and decoder.done, cut


def test_parse_head_reads_status_and_headers_and_refuses_garbage() -> None:
    status, headers = parse_head(b"HTTP/1.1 409 Conflict\r\nContent-Length: 12\r\nX-A: b")
    assert status == 409 and headers == {"content-length": "12", "x-a": "b"}
    with pytest.raises(HttpError, match="not an HTTP"):
        parse_head(b"SSH-2.0-OpenSSH")


def test_build_request_frames_a_json_body() -> None:
    raw = build_request("POST", "/x", "h:1", {"a": 1}, {"X-Worker-Token": "t"})
    head, _, body = raw.partition(b"\r\n\r\n")
    assert body == b'{"a":1}'
    assert b"Content-Length: 7" in head and b"X-Worker-Token: t" in head


async def test_a_request_its_caller_gave_up_on_gives_its_pool_place_back() -> None:
    """The abuse benchmark's probe times out a request a starved server never answers;
    the pool (here of one connection) must still serve the next request rather than
    wait for ever for the place the lost one held."""
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await reader.readuntil(b"\r\n\r\n")
        if connections == 1:
            await reader.read()  # never answers; returns once the client closes
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    pool = HttpPool("127.0.0.1", server.sockets[0].getsockname()[1], size=1)
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pool.request("GET", "/never"), 0.2)
        assert await asyncio.wait_for(pool.request("GET", "/next"), 10) == (200, {})
    finally:
        pool.close()
        server.close()


async def test_a_connection_can_come_from_another_loopback_address() -> None:
    """The attacker of the abuse benchmark connects from 127.0.0.2, so the server's
    per-address bounds tell it apart from the measuring client on 127.0.0.1."""
    peers: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername")[0])
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = await HttpConnection.open("127.0.0.1", port, local_host="127.0.0.2")
    try:
        assert await conn.request(build_request("GET", "/", "h")) == (204, b"")
        assert peers == ["127.0.0.2"]
    finally:
        conn.close()
        server.close()


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99
    assert percentile(values, 100) == 100 and percentile([7.0], 99) == 7.0


def test_profiling_without_py_spy_is_refused_before_a_server_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(orchestrator_proc, "PROFILE", True)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    server = Orchestrator(tmp_path / "server", profile_name="t")
    with pytest.raises(RuntimeError, match="needs py-spy"):
        server.start(timeout_s=5)
    assert server.process is None


@pytest.mark.e2e
@pytest.mark.skipif(
    not Path(sys.executable).with_name("py-spy").exists(), reason="py-spy: the bench extra"
)
def test_a_profiled_server_leaves_its_collapsed_stacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(orchestrator_proc, "PROFILE", True)
    monkeypatch.setattr(orchestrator_proc, "RESULTS_DIR", tmp_path / "results")
    server = Orchestrator(tmp_path / "server", profile_name="t").start(timeout_s=30)
    server.stop()
    stacks = (tmp_path / "results" / "profile-t.txt").read_text().splitlines()
    # One "thread (tid): name;frame;frame... count" line per distinct stack.
    assert stacks and all(line.startswith("thread (") for line in stacks)
    assert any("MainThread" in line and "run_forever" in line for line in stacks)


async def test_a_job_submit_arriving_before_the_last_report_is_answered_runs_next() -> None:
    """The orchestrator may push a worker's next job before the worker has read the
    answer to its completion report; the simulated worker keeps it and runs it next,
    as tunefleet's agent does, instead of dropping it (which left the job to the
    acknowledgement timeout and the benchmark waiting)."""
    from bench.loadgen import LoadGen, SimWorker

    gen = LoadGen(port=1, admin_token="t", server_pid=None, pool=1)
    gen.on_job = "complete"
    answers: list[tuple[str, str]] = []
    first_answered = asyncio.Event()
    first_in_flight = asyncio.Event()

    async def report(worker: SimWorker, job_id: str, status: str) -> int:
        answers.append((job_id, status))
        if (job_id, status) == ("j1", "completed"):
            first_in_flight.set()
            await first_answered.wait()
        return 200

    gen.report = report  # type: ignore[method-assign]
    worker = SimWorker(0, "w0", "wt_x")
    stream = SimpleNamespace(owner=worker)
    gen.on_event(stream, "job_submit", b'{"job_id": "j1"}', 1)  # type: ignore[arg-type]
    await asyncio.wait_for(first_in_flight.wait(), 5)
    gen.on_event(stream, "job_submit", b'{"job_id": "j2"}', 2)  # type: ignore[arg-type]
    first_answered.set()
    for _ in range(100):
        if ("j2", "completed") in answers:
            break
        await asyncio.sleep(0)
    assert answers == [
        ("j1", "running"),
        ("j1", "completed"),
        ("j2", "running"),
        ("j2", "completed"),
    ]
    assert worker.job_id is None and worker.next_job_id is None
