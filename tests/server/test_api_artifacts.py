"""The artifact endpoints on a real orchestrator (in-process) with the embedded store on
disk: upload credentials in job_submit, the S3-spelled upload endpoint, checkpoints and
their retention, resume on retry, and the people's list/download/delete."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from tests.server.conftest import Server
from tests.server.protocol import WorkerClient, eventually
from tunefleet.artifacts import service as artifact_service
from tunefleet.http import keys

TOKEN_HEADER = "X-Upload-Token"


class Uploader:
    """What a trainer holding a job_submit's upload credentials does."""

    def __init__(self, server: Server, event: dict[str, Any]) -> None:
        self.client = server.client
        self.base = urlsplit(event["upload_endpoint"]).path
        self.token = event["upload_token"]
        self.job_id = event["job_id"]

    def url(self, key: str, bucket: str = "outputs") -> str:
        return f"{self.base}/{bucket}/{key}"

    def headers(self, **extra: str) -> dict[str, str]:
        return {TOKEN_HEADER: self.token, **extra}

    async def put(self, key: str, data: bytes, **headers: str) -> Any:
        return await self.client.put(self.url(key), data=data, headers=self.headers(**headers))

    async def stored(self, key: str, data: bytes) -> dict[str, Any]:
        resp = await self.put(key, data)
        assert resp.status == 200, await resp.text()
        return dict(await resp.json())

    async def checkpoint(self, step: int, files: dict[str, bytes]) -> Any:
        name = f"checkpoint-{step}"
        entries = []
        for rel, data in files.items():
            await self.stored(f"{name}/{rel}", data)
            entries.append(
                {
                    "key": f"{name}/{rel}",
                    "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            )
        manifest = {"checkpoint": name, "step": step, "files": entries}
        return await self.put(f"{name}/.tunefleet-manifest.json", json.dumps(manifest).encode())


async def raw_put(server: Server, path: str, token: str) -> tuple[int, bytes]:
    host, port = server.client.host, server.client.port
    reader, writer = await asyncio.open_connection(host, port)
    request = (
        f"PUT {path} HTTP/1.1\r\nHost: {host}\r\n{TOKEN_HEADER}: {token}\r\n"
        "Content-Length: 1\r\nConnection: close\r\n\r\nx"
    )
    writer.write(request.encode())
    await writer.drain()
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def dispatched(server: Server, worker: WorkerClient, **submit: Any) -> dict[str, Any]:
    submit.setdefault("target", "worker")
    await server.submit(**submit)
    return await worker.take_job()


def objects_on_disk(server: Server, job_id: str) -> set[str]:
    root = server.data_dir / "artifacts" / "jobs" / job_id
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


async def timeline(server: Server, job_id: str) -> list[str]:
    job = await server.job(job_id)
    return [e["detail"].get("message", e["kind"]) for e in job["timeline"]]


# --- credentials in job_submit ----------------------------------------------------------


async def test_every_dispatch_carries_an_endpoint_and_a_token_for_its_attempt(
    make_server: Any,
) -> None:
    server = await make_server(advertise_url="https://orch.example:8443/")
    worker = await server.connected_worker()
    event = await dispatched(server, worker)
    # A path: SimpleTuner's agent puts the orchestrator URL it uses in front of it.
    assert event["upload_endpoint"] == "/api/artifacts"
    assert event["upload_token"].startswith("ut_") and len(event["upload_token"]) > 40
    assert event["resume_checkpoint"] is None
    # Stored hashed: the token itself is nowhere in the database file.
    raw = b"".join(p.read_bytes() for p in server.data_dir.glob("*.db*"))
    assert event["upload_token"].encode() not in raw
    assert hashlib.sha256(event["upload_token"].encode()).hexdigest().encode() in raw


async def test_the_endpoint_is_a_path_whatever_the_advertised_address(make_server: Any) -> None:
    server = await make_server(host="127.0.0.1", port=8123)
    worker = await server.connected_worker()
    event = await dispatched(server, worker)
    assert event["upload_endpoint"] == "/api/artifacts"


async def test_simpletuners_agent_can_put_to_the_endpoint_it_builds(server: Server) -> None:
    """SimpleTuner's agent hands its trainer f"{orchestrator_url}{upload_endpoint}"; the
    trainer then PUTs {that}/{bucket}/{key}. An absolute upload_endpoint would break this."""
    worker = await server.connected_worker()
    event = await dispatched(server, worker)
    orchestrator_url = str(server.client.make_url("")).rstrip("/")
    endpoint = f"{orchestrator_url}{event['upload_endpoint']}"
    async with (
        aiohttp.ClientSession() as session,
        session.put(
            f"{endpoint}/outputs/model.safetensors",
            data=b"weights",
            headers={TOKEN_HEADER: event["upload_token"]},
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()
    assert objects_on_disk(server, event["job_id"]) >= {"model.safetensors"}


# --- the upload endpoint ------------------------------------------------------------------


async def test_a_put_is_stored_on_disk_with_its_checksum_and_audited(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    data = b"weights" * 100_000
    body = await up.stored("pytorch_lora_weights.safetensors", data)
    digest = hashlib.sha256(data).hexdigest()
    assert body == {"key": "pytorch_lora_weights.safetensors", "size": len(data), "sha256": digest}
    path = server.data_dir / "artifacts" / "jobs" / up.job_id / "pytorch_lora_weights.safetensors"
    assert path.read_bytes() == data
    assert not list((server.data_dir / "artifacts" / ".tmp").iterdir())
    events = await server.audit(kind="artifact.uploaded")
    assert events[0]["target"] == up.job_id
    assert events[0]["detail"]["sha256"] == digest
    assert up.token not in json.dumps(events)


async def test_two_puts_of_one_key_leave_the_record_and_the_file_agreeing(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first upload's record is held back until the second has had every chance to
    rename its file over the first's: the record must still describe the file on disk."""
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    first, second = b"first" * 50_000, b"second" * 50_000
    path = server.data_dir / "artifacts" / "jobs" / up.job_id / "model.bin"
    records = server.store.artifacts
    record = records.put
    held: list[bool] = []

    async def late_first_record(*args: Any, **kwargs: Any) -> Any:
        if not held:
            held.append(True)
            for _ in range(100):  # until the second file replaces ours, or 2 s
                if path.read_bytes() == second:
                    break
                await asyncio.sleep(0.02)
        return await record(*args, **kwargs)

    monkeypatch.setattr(records, "put", late_first_record)
    one = asyncio.ensure_future(up.put("model.bin", first))
    for _ in range(500):
        if held:
            break
        await asyncio.sleep(0.01)
    assert held, "the first upload never reached its record"
    two = asyncio.ensure_future(up.put("model.bin", second))
    answers = await asyncio.gather(one, two)
    assert [a.status for a in answers] == [200, 200]
    listed = await server.ok("GET", f"/api/queue/{up.job_id}/artifacts")
    [entry] = [o for o in listed["artifacts"] if o["key"] == "model.bin"]
    on_disk = path.read_bytes()
    assert entry["sha256"] == hashlib.sha256(on_disk).hexdigest()
    assert entry["size"] == len(on_disk)


async def test_a_checksum_header_that_disagrees_stores_nothing(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    await up.stored("model.bin", b"first")
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    resp = await up.put("model.bin", b"second", **{"x-amz-checksum-sha256": wrong})
    assert resp.status == 400
    assert "mismatch" in (await resp.json())["detail"]
    path = server.data_dir / "artifacts" / "jobs" / up.job_id / "model.bin"
    assert path.read_bytes() == b"first"  # what was stored before is untouched
    right = base64.b64encode(hashlib.sha256(b"second").digest()).decode()
    resp = await up.put("model.bin", b"second", **{"x-amz-checksum-sha256": right})
    assert resp.status == 200 and path.read_bytes() == b"second"


async def test_without_a_valid_token_nothing_is_stored(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    resp = await server.client.put(up.url("a.bin"), data=b"x")
    assert resp.status == 401
    assert "X-Upload-Token" in (await resp.json())["detail"]
    resp = await server.client.put(up.url("a.bin"), data=b"x", headers={TOKEN_HEADER: "ut_nope"})
    assert (resp.status, (await resp.json())["detail"]) == (401, "Invalid upload token")
    # A worker token is not an upload token.
    resp = await server.client.put(up.url("a.bin"), data=b"x", headers={TOKEN_HEADER: worker.token})
    assert resp.status == 401
    assert objects_on_disk(server, up.job_id) == set()


async def test_bad_keys_are_refused_with_a_clear_400(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    # Sent byte for byte: an HTTP client library would normalize some of these away.
    for key in ("a/../../b", "a/%2E%2E/b", "a/./b", "a//b", "%00x", "x" * 1025, "a%5Cb"):
        status, body = await raw_put(server, f"{up.base}/outputs/{key}", up.token)
        assert status == 400, (key, status, body)
        assert "key" in json.loads(body)["detail"], body
    assert objects_on_disk(server, up.job_id) == set()


async def test_a_token_opens_only_its_own_job(server: Server) -> None:
    w1 = await server.connected_worker("w1")
    first = Uploader(server, await dispatched(server, w1))
    w2 = await server.connected_worker("w2")
    second = Uploader(server, await dispatched(server, w2))
    await first.stored("secret.bin", b"first job's")
    # The second job's token names the same key: it reads and writes its own prefix only.
    resp = await server.client.get(second.url("secret.bin"), headers=second.headers())
    assert resp.status == 404
    await second.stored("secret.bin", b"second job's")
    resp = await server.client.get(first.url("secret.bin"), headers=first.headers())
    assert await resp.read() == b"first job's"


async def test_the_token_stops_working_when_the_attempt_ends(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    await up.stored("a.bin", b"x")
    assert (await worker.report(up.job_id, "completed")).status == 200
    await server.wait_job(up.job_id, "completed")
    resp = await up.put("b.bin", b"y")
    assert resp.status == 401
    detail = (await resp.json())["detail"]
    assert f"job {up.job_id} attempt 1" in detail and "ended" in detail
    assert up.token not in detail


async def test_multipart_upload_resumes_and_completes(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    url = up.url("big/model.safetensors")
    started = await server.client.post(url + "?uploads", headers=up.headers())
    assert started.status == 200
    upload_id = (await started.json())["upload_id"]
    parts = [b"a" * 70_000, b"b" * 50_000, b"c" * 10]
    etags = []
    for number, data in enumerate(parts[:2], start=1):
        resp = await server.client.put(
            f"{url}?partNumber={number}&uploadId={upload_id}", data=data, headers=up.headers()
        )
        assert resp.status == 200, await resp.text()
        etags.append((await resp.json())["etag"])
    # After an outage the uploader asks what is there and sends only the rest.
    listed = await (
        await server.client.get(f"{url}?uploadId={upload_id}", headers=up.headers())
    ).json()
    assert [(p["part_number"], p["etag"]) for p in listed["parts"]] == [
        (1, etags[0]),
        (2, etags[1]),
    ]
    resp = await server.client.put(
        f"{url}?partNumber=3&uploadId={upload_id}", data=parts[2], headers=up.headers()
    )
    etags.append((await resp.json())["etag"])
    body = {"parts": [{"part_number": n, "etag": e} for n, e in enumerate(etags, start=1)]}
    done = await server.client.post(f"{url}?uploadId={upload_id}", json=body, headers=up.headers())
    assert done.status == 200, await done.text()
    whole = b"".join(parts)
    assert (await done.json())["sha256"] == hashlib.sha256(whole).hexdigest()
    got = await server.client.get(url, headers=up.headers())
    assert await got.read() == whole


async def test_completing_with_a_wrong_etag_is_refused(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    url = up.url("m.bin")
    upload_id = (await (await server.client.post(url + "?uploads", headers=up.headers())).json())[
        "upload_id"
    ]
    await server.client.put(
        f"{url}?partNumber=1&uploadId={upload_id}", data=b"z", headers=up.headers()
    )
    body = {"parts": [{"part_number": 1, "etag": "0" * 64}]}
    resp = await server.client.post(f"{url}?uploadId={upload_id}", json=body, headers=up.headers())
    assert resp.status == 400 and "etag" in (await resp.json())["detail"]
    aborted = await server.client.delete(f"{url}?uploadId={upload_id}", headers=up.headers())
    assert aborted.status == 200
    again = await server.client.get(f"{url}?uploadId={upload_id}", headers=up.headers())
    assert again.status == 404


# --- checkpoints, retention, resume -------------------------------------------------------


async def test_a_manifest_completes_a_checkpoint_and_old_ones_are_pruned(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    for step in (100, 200, 300, 400):
        resp = await up.checkpoint(
            step, {"model.safetensors": f"w{step}".encode(), "state.pt": b"s"}
        )
        assert resp.status == 200, await resp.text()
    listing = await server.ok("GET", f"/api/queue/{up.job_id}/artifacts")
    assert [c["name"] for c in listing["checkpoints"]] == [
        "checkpoint-400",
        "checkpoint-300",
        "checkpoint-200",
    ]
    assert listing["checkpoints"][0]["bytes"] == len(b"w400") + 1
    assert not any(k.startswith("checkpoint-100/") for k in objects_on_disk(server, up.job_id))
    assert "checkpoint-400 stored" in await timeline(server, up.job_id)


async def test_a_manifest_listing_a_missing_file_is_refused(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    manifest = {
        "checkpoint": "checkpoint-5",
        "step": 5,
        "files": [{"key": "checkpoint-5/model.bin", "size": 3, "sha256": None}],
    }
    resp = await up.put("checkpoint-5/.tunefleet-manifest.json", json.dumps(manifest).encode())
    assert resp.status == 400
    assert "not stored" in (await resp.json())["detail"]
    listing = await server.ok("GET", f"/api/queue/{up.job_id}/artifacts")
    assert listing["checkpoints"] == []


async def test_a_retry_is_told_the_newest_checkpoint_and_may_read_it(server: Server) -> None:
    w1 = await server.connected_worker("w1")
    first = Uploader(server, await dispatched(server, w1))
    await first.checkpoint(200, {"model.safetensors": b"weights-200"})
    assert (await w1.disconnect()).status == 200  # the first worker is lost mid-run
    w1.close()
    w2 = await server.connected_worker("w2")
    event = await w2.take_job()
    assert event["job_id"] == first.job_id and event["attempt"] == 2
    assert event["resume_checkpoint"] == "checkpoint-200"
    second = Uploader(server, event)
    assert second.token != first.token
    # The first attempt's token is dead; the retry's reads the earlier checkpoint.
    resp = await server.client.get(
        first.url("checkpoint-200/model.safetensors"), headers=first.headers()
    )
    assert resp.status == 401
    listed = await server.client.get(
        f"{second.base}/outputs?prefix=checkpoint-200/", headers=second.headers()
    )
    keys = [o["key"] for o in (await listed.json())["objects"]]
    assert keys == ["checkpoint-200/.tunefleet-manifest.json", "checkpoint-200/model.safetensors"]
    resp = await server.client.get(
        second.url("checkpoint-200/model.safetensors"),
        headers={**second.headers(), "Range": "bytes=8-"},
    )
    assert resp.status == 206 and await resp.read() == b"200"

    # Acknowledged is not resumed: the download may still fail and the trainer start fresh.
    assert "resumed from checkpoint-200" not in await timeline(server, first.job_id)
    report = await w2.report(first.job_id, "running", attempt=2, resumed_from="checkpoint-200")
    assert report.status == 200

    async def resumed() -> list[str] | None:
        lines = await timeline(server, first.job_id)
        return lines if "resumed from checkpoint-200" in lines else None

    await eventually(resumed, "the resume on the timeline")


async def test_a_resume_report_must_name_a_checkpoint(server: Server) -> None:
    worker = await server.connected_worker()
    event = await dispatched(server, worker)
    resp = await worker.report(event["job_id"], "running", resumed_from="../etc")
    assert resp.status == 400
    assert "resumed_from" in (await resp.json())["detail"]


# --- people's side ------------------------------------------------------------------------


async def test_people_list_download_and_delete_a_jobs_artifacts(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    data = bytes(range(256)) * 1000
    await up.stored("final/model.safetensors", data)
    # An upload started and never finished: deleting the job's artifacts drops its parts.
    started = await server.client.post(up.url("half.bin") + "?uploads", headers=up.headers())
    upload_id = (await started.json())["upload_id"]
    part = f"{up.url('half.bin')}?partNumber=1&uploadId={upload_id}"
    assert (await server.client.put(part, data=b"p", headers=up.headers())).status == 200
    listing = await server.ok("GET", f"/api/queue/{up.job_id}/artifacts")
    (item,) = listing["artifacts"]
    assert item["key"] == "final/model.safetensors" and item["size"] == len(data)
    assert item["sha256"] == hashlib.sha256(data).hexdigest() and item["attempt"] == 1
    got = await server.get(f"/api/queue/{up.job_id}/artifacts/final/model.safetensors")
    assert got.status == 200 and await got.read() == data
    ranged = await server.get(
        f"/api/queue/{up.job_id}/artifacts/final/model.safetensors",
        headers={**server.admin, "Range": "bytes=0-9"},
    )
    assert ranged.status == 206 and await ranged.read() == data[:10]
    missing = await server.get(f"/api/queue/{up.job_id}/artifacts/nope.bin")
    assert missing.status == 404
    # Deleting needs the job to have ended.
    early = await server.delete(f"/api/queue/{up.job_id}/artifacts")
    assert early.status == 409 and "cancel it" in (await early.json())["detail"]
    await worker.report(up.job_id, "completed")
    await server.wait_job(up.job_id, "completed")
    assert "artifacts stored (1 files, 256000 bytes)" in await timeline(server, up.job_id)
    gone = await server.ok("DELETE", f"/api/queue/{up.job_id}/artifacts")
    assert gone == {"job_id": up.job_id, "deleted": 1}
    assert objects_on_disk(server, up.job_id) == set()
    assert list((server.data_dir / "artifacts" / ".multipart").iterdir()) == []
    assert (await server.ok("GET", f"/api/queue/{up.job_id}/artifacts"))["artifacts"] == []
    kinds = {e["kind"] for e in await server.audit()}
    assert {"artifact.uploaded", "artifact.downloaded", "artifacts.deleted"} <= kinds


async def test_a_completed_report_saying_outputs_were_not_stored_is_on_the_timeline(
    server: Server,
) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    resp = await worker.report(
        up.job_id, "completed", outputs={"stored": False, "reason": "bucket refused writes"}
    )
    assert resp.status == 200
    await server.wait_job(up.job_id, "completed")
    assert "artifacts not stored: bucket refused writes" in await timeline(server, up.job_id)


async def test_artifacts_of_an_unknown_job_are_404(server: Server) -> None:
    for method in ("GET", "DELETE"):
        resp = await server.client.request(
            method, "/api/queue/j_nope/artifacts", headers=server.admin
        )
        assert resp.status == 404
    resp = await server.get("/api/queue/j_nope/artifacts/a.bin")
    assert resp.status == 404


async def test_upload_tokens_never_reach_the_logs(
    server: Server, capfd: pytest.CaptureFixture[str]
) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    await up.stored("model.bin", b"x")
    assert (await worker.report(up.job_id, "completed")).status == 200
    await server.wait_job(up.job_id, "completed")
    assert (await up.put("late.bin", b"y")).status == 401  # a refusal is logged and audited
    out, err = capfd.readouterr()
    assert "auth_failed" in out + err
    assert up.token not in out + err
    assert up.token[3:] not in json.dumps(await server.audit())


async def test_expect_100_continue_uploads_to_the_embedded_store(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    resp = await server.client.put(
        up.url("model.bin"), data=b"z" * 100_000, headers=up.headers(), expect100=True
    )
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["size"] == 100_000


async def test_the_outputs_manifest_must_agree_with_what_is_stored(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    await up.stored("model.bin", b"abc")
    entry = {"key": "model.bin", "size": 3, "sha256": hashlib.sha256(b"abd").hexdigest()}
    resp = await up.put(".tunefleet-manifest.json", json.dumps({"files": [entry]}).encode())
    assert resp.status == 400, await resp.text()
    entry["sha256"] = hashlib.sha256(b"abc").hexdigest()
    resp = await up.put(".tunefleet-manifest.json", json.dumps({"files": [entry]}).encode())
    assert resp.status == 200, await resp.text()
    nested = {"key": ".tunefleet-manifest.json", "size": 1, "sha256": None}
    resp = await up.put(".tunefleet-manifest.json", json.dumps({"files": [nested]}).encode())
    assert resp.status == 400


async def test_malformed_upload_requests_are_refused_with_what_to_send(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    h = up.headers()
    url = up.url("m.bin")
    client = server.client

    async def detail(resp: Any, status: int) -> str:
        assert resp.status == status, (status, await resp.text())
        return str((await resp.json())["detail"])

    assert "POST ?uploads" in await detail(await client.post(url, headers=h), 400)
    assert "?uploadId=U aborts" in await detail(await client.delete(url, headers=h), 400)
    gone = await client.put(f"{url}?partNumber=1&uploadId=nope", data=b"x", headers=h)
    assert "no open multipart upload" in await detail(gone, 404)
    upload_id = (await (await client.post(url + "?uploads", headers=h)).json())["upload_id"]
    for number in ("0", "10001", "x"):
        bad = await client.put(
            f"{url}?partNumber={number}&uploadId={upload_id}", data=b"", headers=h
        )
        assert "partNumber" in await detail(bad, 400)
    # Another key cannot borrow this upload.
    other = await client.put(
        f"{up.url('other.bin')}?partNumber=1&uploadId={upload_id}", data=b"x", headers=h
    )
    await detail(other, 404)
    missing = {"parts": [{"part_number": 1, "etag": "0" * 64}]}
    resp = await client.post(f"{url}?uploadId={upload_id}", json=missing, headers=h)
    assert "never uploaded" in await detail(resp, 400)
    resp = await client.post(f"{url}?uploadId={upload_id}", json={"parts": []}, headers=h)
    await detail(resp, 400)
    manifest_url = up.url("checkpoint-1/.tunefleet-manifest.json")
    assert "one PUT" in await detail(await client.post(manifest_url + "?uploads", headers=h), 400)
    huge = await client.put(manifest_url, data=b" " * (16 * 1024 * 1024 + 1), headers=h)
    await detail(huge, 413)
    assert "not JSON" in await detail(
        await up.put("checkpoint-1/.tunefleet-manifest.json", b"{"), 400
    )
    wrong = json.dumps({"checkpoint": "checkpoint-2", "step": 2, "files": []}).encode()
    assert "another checkpoint" in await detail(
        await up.put("checkpoint-1/.tunefleet-manifest.json", wrong), 400
    )
    listed = await client.get(f"{up.base}/outputs?prefix=../x", headers=h)
    await detail(listed, 400)


async def test_an_ended_jobs_unfinished_uploads_are_aborted(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker, max_retries=0))
    started = await server.client.post(up.url("big.bin") + "?uploads", headers=up.headers())
    upload_id = (await started.json())["upload_id"]
    part = f"{up.url('big.bin')}?partNumber=1&uploadId={upload_id}"
    assert (await server.client.put(part, data=b"p" * 1000, headers=up.headers())).status == 200
    parts = server.data_dir / "artifacts" / ".multipart"
    assert list(parts.iterdir()) != []
    await worker.report(up.job_id, "failed", error="out of memory")
    await server.wait_job(up.job_id, "failed")

    async def swept() -> bool | None:
        gone = (
            list(parts.iterdir()) == []
            and await server.store.artifacts.multipart(upload_id) is None
        )
        return True if gone else None

    await eventually(swept, "the unfinished upload to be aborted")


async def test_at_start_a_crashs_leftover_temporary_files_are_removed(make_server: Any) -> None:
    first = await make_server()
    await first.client.close()
    tmp = first.data_dir / "artifacts" / ".tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    crashed = tmp / "3f2a"
    crashed.write_bytes(b"half an object")
    then = crashed.stat().st_mtime - 60
    os.utime(crashed, (then, then))
    server = await make_server()

    async def swept() -> bool | None:
        return True if not crashed.exists() else None

    await eventually(swept, "the crash's temporary file to be removed")
    assert (await server.client.get("/healthz")).status == 200


async def test_at_start_uploads_whose_attempt_ended_while_unwatched_are_aborted(
    make_server: Any,
) -> None:
    first = await make_server()
    worker = await first.connected_worker()
    up = Uploader(first, await dispatched(first, worker, max_retries=0))
    started = await first.client.post(up.url("big.bin") + "?uploads", headers=up.headers())
    upload_id = (await started.json())["upload_id"]
    part = f"{up.url('big.bin')}?partNumber=1&uploadId={upload_id}"
    assert (await first.client.put(part, data=b"p" * 1000, headers=up.headers())).status == 200
    # As when the upload was started by an earlier process: nothing watches it end.
    first.app[keys.ARTIFACTS]._multipart_jobs.clear()
    await worker.report(up.job_id, "failed", error="out of memory")
    await first.wait_job(up.job_id, "failed")
    await first.client.close()
    folder = first.data_dir / "artifacts" / ".multipart" / upload_id
    assert folder.is_dir()
    server = await make_server()

    async def aborted() -> bool | None:
        gone = not folder.exists() and await server.store.artifacts.multipart(upload_id) is None
        return True if gone else None

    await eventually(aborted, "the ended attempt's upload to be aborted")


async def test_an_upload_still_live_at_start_is_aborted_when_its_job_ends(server: Server) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker, max_retries=0))
    started = await server.client.post(up.url("big.bin") + "?uploads", headers=up.headers())
    upload_id = (await started.json())["upload_id"]
    artifacts = server.app[keys.ARTIFACTS]
    artifacts._multipart_jobs.clear()  # as when an earlier process started it
    await artifacts.tidy()
    assert await server.store.artifacts.multipart(upload_id) is not None, "still live: kept"
    await worker.report(up.job_id, "failed", error="out of memory")
    await server.wait_job(up.job_id, "failed")
    folder = server.data_dir / "artifacts" / ".multipart" / upload_id

    async def aborted() -> bool | None:
        gone = not folder.exists() and await server.store.artifacts.multipart(upload_id) is None
        return True if gone else None

    await eventually(aborted, "the upload to be aborted when its job ended")


async def test_at_start_an_upload_of_a_superseded_attempt_is_aborted(server: Server) -> None:
    w1 = await server.connected_worker("w1")
    first = Uploader(server, await dispatched(server, w1))
    started = await server.client.post(first.url("big.bin") + "?uploads", headers=first.headers())
    upload_id = (await started.json())["upload_id"]
    assert (await w1.disconnect()).status == 200  # the first worker is lost mid-upload
    w1.close()
    w2 = await server.connected_worker("w2")
    event = await w2.take_job()
    assert event["job_id"] == first.job_id and event["attempt"] == 2
    second = Uploader(server, event)
    kept = await server.client.post(second.url("big.bin") + "?uploads", headers=second.headers())
    kept_id = (await kept.json())["upload_id"]
    await server.app[keys.ARTIFACTS].tidy()  # as a restart now would
    parts = server.data_dir / "artifacts" / ".multipart"
    assert await server.store.artifacts.multipart(upload_id) is None
    assert not (parts / upload_id).exists()
    assert await server.store.artifacts.multipart(kept_id) is not None, "the live one is kept"
    assert (parts / kept_id).is_dir()


class CountedSizes:
    """Counts the reads of a job's stored sizes (one per completed report, at most)."""

    def __init__(self, server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
        records = server.app[keys.ARTIFACTS].records
        self.jobs: list[str] = []
        real = records.sizes

        async def sizes(job_id: str) -> list[int]:
            self.jobs.append(job_id)
            return list(await real(job_id))

        monkeypatch.setattr(records, "sizes", sizes)


async def test_a_job_that_uploaded_nothing_completes_without_reading_sizes(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = CountedSizes(server, monkeypatch)
    worker = await server.connected_worker()
    quiet = Uploader(server, await dispatched(server, worker))
    await worker.report(quiet.job_id, "completed")
    await server.wait_job(quiet.job_id, "completed")
    assert counted.jobs == []
    assert not any("artifacts stored" in line for line in await timeline(server, quiet.job_id))
    # One that uploaded is counted and its line written, as always.
    busy = Uploader(server, await dispatched(server, worker))
    await busy.stored("final/model.bin", b"weights")
    await worker.report(busy.job_id, "completed")
    await server.wait_job(busy.job_id, "completed")
    assert counted.jobs == [busy.job_id]
    assert "artifacts stored (1 files, 7 bytes)" in await timeline(server, busy.job_id)


async def test_a_job_from_before_the_start_is_read_as_always(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = CountedSizes(server, monkeypatch)
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    server.app[keys.ARTIFACTS]._nothing_stored.clear()  # as when submitted to an earlier process
    await worker.report(up.job_id, "completed")
    await server.wait_job(up.job_id, "completed")
    assert counted.jobs == [up.job_id]


async def test_only_the_newest_jobs_are_remembered_as_having_stored_nothing(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(artifact_service, "NOTHING_STORED_LIMIT", 2)
    artifacts = server.app[keys.ARTIFACTS]
    artifacts._nothing_stored.clear()
    for job_id in ("j_1", "j_2", "j_3"):
        artifacts.note_new_job(job_id)
    assert list(artifacts._nothing_stored) == ["j_2", "j_3"]  # j_1 is read at its end
