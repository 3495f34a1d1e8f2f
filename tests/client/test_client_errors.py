"""Every error class of ``tunefleet.client``, and failover between orchestrators, against a
scripted HTTP server (answers a healthy orchestrator does not give on demand) and
against nothing at all."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
from pathlib import Path

import pytest

from tests.client.conftest import Scripted
from tests.e2e.harness import Orchestrator
from tunefleet.client import (
    ApiError,
    ChecksumMismatch,
    Client,
    ClientError,
    Connection,
    InsufficientStorage,
    NotTheOrchestrator,
    ServerError,
    SettingsError,
    TlsFailure,
    TooManyRequests,
    Unavailable,
    Unreachable,
)

JOB = {"job_id": "j_1", "status": "running"}


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_bad_url_is_refused_before_any_request() -> None:
    with pytest.raises(SettingsError, match="'ftp://x' is not an http:// or https:// URL"):
        Client("ftp://x", token="tf_x")
    with pytest.raises(ValueError):  # SettingsError is a ValueError too
        Client(["http://ok:1", "nohost"], token="tf_x")


def test_settings_come_from_arguments_then_the_environment_then_defaults() -> None:
    env = {
        "TUNEFLEET_URL": "https://a:1, https://b:2/",
        "TUNEFLEET_TOKEN": " tf_env \n",
        "TUNEFLEET_CA_CERT": "/etc/ca.pem",
        "TUNEFLEET_SSL_NO_VERIFY": "true",
    }
    conn = Connection.resolve(environ=env)
    assert conn.urls == ("https://a:1", "https://b:2")
    assert conn.token == "tf_env" and conn.ca_cert == Path("/etc/ca.pem") and not conn.verify
    given = Connection.resolve(["http://c:3"], "tf_arg", verify=True, environ=env)
    assert given.urls == ("http://c:3",) and given.token == "tf_arg" and given.verify
    bare = Connection.resolve(environ={})
    assert bare.urls == ("http://127.0.0.1:8001",) and bare.token is None and bare.verify


def test_nothing_listening_is_unreachable_with_what_to_check() -> None:
    url = _closed_port_url()
    with Client(url, token="tf_x", connect_timeout_s=2) as tf, pytest.raises(Unreachable) as lost:
        tf.get("j_1")
    assert f"Cannot connect to the orchestrator at {url}: connection refused" in str(lost.value)
    assert "Check url= (or TUNEFLEET_URL)" in str(lost.value)


def test_a_down_orchestrator_in_the_list_is_skipped(orchestrator: Orchestrator) -> None:
    from tests.e2e.harness import ADMIN_TOKEN

    down = _closed_port_url()
    with Client([down, orchestrator.url], token=ADMIN_TOKEN) as tf:
        assert tf.urls == (down, orchestrator.url)
        assert "queue_depth" in tf.request("GET", "/api/queue/stats")
        assert tf.url == orchestrator.url  # it stays with the one that answered


def test_a_standby_503_moves_to_the_active_one_it_names(
    scripted: Scripted, scripted_active: Scripted
) -> None:
    down = _closed_port_url()
    standby, active = scripted, scripted_active
    standby.json(
        "/api/queue/j_1",
        503,
        {"detail": "this orchestrator is a standby", "active_url": active.url},
    )
    active.json("/api/queue/j_1", 200, JOB)
    # The standby names the active one: the client goes there, not to the next (down).
    with Client([standby.url, down, f"{active.url}/"], token="tf_x") as tf:
        assert tf.get("j_1")["status"] == "running"
        assert tf.url == active.url
        assert tf.get("j_1")["status"] == "running"  # and stays there
    assert len([1 for _m, path, _h in standby.seen if path == "/api/queue/j_1"]) == 1
    with Client(standby.url, token="tf_x") as alone, pytest.raises(Unavailable) as refused:
        alone.get("j_1")
    assert refused.value.status == 503 and isinstance(refused.value, Unreachable)
    assert "is not the active one" in str(refused.value)
    assert "url= (or TUNEFLEET_URL) separated by commas" in str(refused.value)


def test_starting_500_429_and_507_are_their_own_classes(scripted: Scripted) -> None:
    scripted.json("/api/queue/j_1", 503, {"detail": "starting"})
    scripted.json("/api/queue/j_2", 500, {"detail": "internal error; request id 3f2a"})
    scripted.json(
        "/api/queue/j_3", 429, {"detail": "too many failed sign-ins"}, {"Retry-After": "42"}
    )
    scripted.json("/api/queue/j_4", 507, {"detail": "not enough free disk"})
    scripted.json("/api/queue/j_5", 405, {"detail": "Method not allowed"})
    with Client(scripted.url, token="tf_x") as tf:
        with pytest.raises(Unavailable, match="is starting or stopping"):
            tf.get("j_1")
        with pytest.raises(ServerError) as bug:
            tf.get("j_2")
        assert bug.value.status == 500 and "3f2a" in bug.value.detail
        with pytest.raises(TooManyRequests) as throttled:
            tf.get("j_3")
        assert throttled.value.retry_after_s == 42.0
        with pytest.raises(InsufficientStorage) as full:
            tf.get("j_4")
        assert full.value.status == 507
        with pytest.raises(ApiError) as other:
            tf.get("j_5")
        assert type(other.value) is ApiError and str(other.value) == "Method not allowed (HTTP 405)"


def test_a_web_server_that_is_not_the_orchestrator(scripted: Scripted) -> None:
    scripted.routes["/api/queue/j_1"] = lambda _h: (200, {"Content-Type": "text/html"}, b"<html>")
    with Client(scripted.url, token="tf_x") as tf, pytest.raises(NotTheOrchestrator) as wrong:
        tf.get("j_1")
    assert "not the orchestrator's JSON: is url= (or TUNEFLEET_URL)" in str(wrong.value)


def test_tls_failures_say_how_to_trust_the_certificate(
    orchestrator: Orchestrator, tmp_path: Path
) -> None:
    https = orchestrator.url.replace("http://", "https://")
    with Client(https, token="tf_x") as tf, pytest.raises(TlsFailure) as handshake:
        tf.get("j_1")
    assert "use an http:// URL" in str(handshake.value)
    assert "ca_cert=<data-dir>/tls/cert.pem" in str(handshake.value)
    assert "verify=False" in str(handshake.value)
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate")
    with Client(https, token="tf_x", ca_cert=bogus) as tf, pytest.raises(TlsFailure) as ca:
        tf.get("j_1")
    assert f"cannot load CA certificate {bogus}" in str(ca.value)


def _artifact_routes(scripted: Scripted, data: bytes, sha256: str) -> None:
    listing = {
        "job_id": "j_1",
        "artifacts": [
            {"key": "out/model.bin", "size": len(data), "sha256": sha256, "attempt": 1,
             "created_at": "2026-01-01T00:00:00.000Z"},
        ],
        "checkpoints": [],
    }  # fmt: skip
    scripted.json("/api/queue/j_1/artifacts", 200, listing)

    def object_bytes(headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        wanted = headers.get("Range")
        if wanted:
            start = int(wanted.removeprefix("bytes=").removesuffix("-"))
            content_range = f"bytes {start}-{len(data) - 1}/{len(data)}"
            return 206, {"Content-Range": content_range}, data[start:]
        return 200, {"Content-Type": "application/octet-stream"}, data

    scripted.routes["/api/queue/j_1/artifacts/out/model.bin"] = object_bytes


def test_a_corrupt_download_is_deleted_and_raised(scripted: Scripted, tmp_path: Path) -> None:
    _artifact_routes(scripted, b"the bytes", "0" * 64)
    with Client(scripted.url, token="tf_x") as tf, pytest.raises(ChecksumMismatch) as bad:
        tf.download("j_1", to=tmp_path)
    assert "stored with 0000" in str(bad.value) and "download again" in str(bad.value)
    assert not (tmp_path / "out" / "model.bin").exists()
    assert not (tmp_path / "out" / "model.bin.part").exists()


def test_a_part_file_is_continued_with_a_range_request(scripted: Scripted, tmp_path: Path) -> None:
    data = bytes(range(256)) * 64
    _artifact_routes(scripted, data, hashlib.sha256(data).hexdigest())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "model.bin.part").write_bytes(data[:1000])
    with Client(scripted.url, token="tf_x") as tf:
        (done,) = tf.download("j_1", "out/model.bin", to=tmp_path)
        assert done.path.read_bytes() == data and done.size == len(data)
        ranges = [h.get("Range") for _m, path, h in scripted.seen if path.endswith("model.bin")]
        assert ranges == ["bytes=1000-"]
        # resume=False starts over, whatever a part holds.
        (tmp_path / "out" / "model.bin.part").write_bytes(b"garbage")
        tf.download("j_1", "out/model.bin", to=tmp_path, resume=False)
        assert done.path.read_bytes() == data
    assert [h.get("Range") for _m, p, h in scripted.seen if p.endswith("model.bin")][-1] is None


def test_a_closed_client_says_so() -> None:
    tf = Client("http://127.0.0.1:9", token="tf_secret")
    assert repr(tf) == "Client(url='http://127.0.0.1:9', urls=1, token=set)"
    tf.close()
    tf.close()  # twice is fine
    with pytest.raises(ClientError, match="this Client is closed"):
        tf.get("j_1")


def test_the_api_json_is_kept_whole(scripted: Scripted) -> None:
    """A field a newer orchestrator adds reaches the caller."""
    scripted.json("/api/queue/j_1", 200, {**JOB, "something_new": [1, 2]})
    with Client(scripted.url, token="tf_x") as tf:
        job = tf.get("j_1")
    assert job["status"] == "running" and json.loads(json.dumps(job))["something_new"] == [1, 2]


def test_it_works_inside_a_running_event_loop_as_in_a_notebook(scripted: Scripted) -> None:
    """Jupyter runs cells inside its own event loop; asyncio.run would refuse there."""
    scripted.json("/api/queue/j_1", 200, {**JOB, "status": "completed"})

    async def cell() -> str:
        with Client(scripted.url, token="tf_x") as tf:
            return tf.wait("j_1", timeout_s=5)["status"]

    assert asyncio.run(cell()) == "completed"


def test_callbacks_run_where_they_may_use_the_client_or_are_told_not_to(
    scripted: Scripted, tmp_path: Path
) -> None:
    scripted.json("/api/queue/j_1", 200, {**JOB, "status": "completed"})
    data = b"x" * 10
    _artifact_routes(scripted, data, hashlib.sha256(data).hexdigest())
    with Client(scripted.url, token="tf_x") as tf:
        seen: list[str] = []
        # on_poll runs in the caller's thread: calling the client there is fine.
        tf.wait("j_1", timeout_s=5, on_poll=lambda job: seen.append(tf.get("j_1")["status"]))
        assert seen == ["completed"]
        # on_bytes runs on the client's own loop: a call there is refused, not a hang.
        with pytest.raises(ClientError, match="from a callback the client runs"):
            tf.download("j_1", to=tmp_path, on_bytes=lambda _n: tf.get("j_1") and None)
