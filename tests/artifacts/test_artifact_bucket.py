"""The bucket store against a real S3 API server process (moto's standalone server on a
free loopback port): uploads and downloads go straight to the bucket through presigned
URLs, multipart included; manifests, retention and listings work as with the disk."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from tests.fakes.moto_s3 import AWS_ENV, moto_server
from tests.server.conftest import Server
from tunefleet.http import keys

boto3 = pytest.importorskip("boto3", reason="boto3 is in the test extra: pip install -e '.[test]'")
pytestmark = pytest.mark.timeout(120)

BUCKET = "tunefleet-test"
TOKEN_HEADER = "X-Upload-Token"


@pytest.fixture(scope="module")
def s3_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with moto_server(tmp_path_factory.mktemp("moto")) as url:
        yield url


@pytest.fixture
def bucket(s3_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    client = boto3.client("s3", endpoint_url=s3_url)
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
async def server(make_server: Any, bucket: Any, s3_url: str) -> Server:
    return await make_server(artifact_store=f"s3://{BUCKET}/fleet", s3_endpoint_url=s3_url)


async def _job(server: Server, **submit: Any) -> dict[str, Any]:
    worker = await server.connected_worker()
    await server.submit(target="worker", **submit)
    event = await worker.take_job()
    event["_worker"] = worker
    return event


def _base(event: dict[str, Any]) -> str:
    return urlsplit(event["upload_endpoint"]).path + "/outputs"


async def _put_via_redirect(server: Server, event: dict[str, Any], key: str, data: bytes) -> str:
    """PUT to the orchestrator, then to the presigned URL it answers with: the bytes go to
    the bucket directly. Returns the bucket's ETag."""
    resp = await server.client.put(
        f"{_base(event)}/{key}",
        data=b"",
        headers={TOKEN_HEADER: event["upload_token"]},
        allow_redirects=False,
    )
    assert resp.status == 307, await resp.text()
    location = resp.headers["Location"]
    assert location.startswith("http://127.0.0.1:") and "/fleet/jobs/" in location
    async with aiohttp.ClientSession() as bare, bare.put(location, data=data) as direct:
        assert direct.status == 200, await direct.text()
        return direct.headers["ETag"].strip('"')


async def test_outputs_go_to_the_bucket_directly_and_come_back_presigned(
    server: Server, bucket: Any
) -> None:
    event = await _job(server)
    data = b"model bytes" * 1000
    await _put_via_redirect(server, event, "final/model.safetensors", data)
    stored = bucket.get_object(
        Bucket=BUCKET, Key=f"fleet/jobs/{event['job_id']}/final/model.safetensors"
    )
    assert stored["Body"].read() == data
    listing = await server.ok("GET", f"/api/queue/{event['job_id']}/artifacts")
    (item,) = listing["artifacts"]
    assert (item["key"], item["size"], item["sha256"]) == (
        "final/model.safetensors",
        len(data),
        None,
    )
    resp = await server.get(
        f"/api/queue/{event['job_id']}/artifacts/final/model.safetensors", allow_redirects=False
    )
    assert resp.status == 307
    async with aiohttp.ClientSession() as bare, bare.get(resp.headers["Location"]) as got:
        assert await got.read() == data


async def test_checkpoints_in_a_bucket_are_recorded_and_pruned(server: Server, bucket: Any) -> None:
    event = await _job(server)
    job_id = event["job_id"]
    for step in (1, 2, 3, 4):
        name = f"checkpoint-{step}"
        data = f"weights {step}".encode()
        await _put_via_redirect(server, event, f"{name}/model.bin", data)
        manifest = {
            "checkpoint": name,
            "step": step,
            "files": [
                {
                    "key": f"{name}/model.bin",
                    "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            ],
        }
        resp = await server.client.put(
            f"{_base(event)}/{name}/.tunefleet-manifest.json",
            data=json.dumps(manifest).encode(),
            headers={TOKEN_HEADER: event["upload_token"]},
        )
        assert resp.status == 200, await resp.text()
    listing = await server.ok("GET", f"/api/queue/{job_id}/artifacts")
    assert [c["name"] for c in listing["checkpoints"]] == [
        "checkpoint-4",
        "checkpoint-3",
        "checkpoint-2",
    ]
    keys = {
        o["Key"]
        for o in bucket.list_objects_v2(Bucket=BUCKET, Prefix=f"fleet/jobs/{job_id}/")["Contents"]
    }
    assert not any("/checkpoint-1/" in k for k in keys)
    assert f"fleet/jobs/{job_id}/checkpoint-4/.tunefleet-manifest.json" in keys
    model = next(a for a in listing["artifacts"] if a["key"] == "checkpoint-4/model.bin")
    assert model["sha256"] == hashlib.sha256(b"weights 4").hexdigest()  # from the manifest
    # A manifest naming a file the bucket does not hold is refused.
    bad = {"checkpoint": "checkpoint-9", "step": 9, "files": [{"key": "checkpoint-9/x", "size": 1}]}
    resp = await server.client.put(
        f"{_base(event)}/checkpoint-9/.tunefleet-manifest.json",
        data=json.dumps(bad).encode(),
        headers={TOKEN_HEADER: event["upload_token"]},
    )
    assert resp.status == 400


async def test_multipart_parts_go_to_the_bucket_and_the_orchestrator_completes(
    server: Server, bucket: Any
) -> None:
    event = await _job(server)
    headers = {TOKEN_HEADER: event["upload_token"]}
    url = f"{_base(event)}/big.bin"
    started = await (await server.client.post(url + "?uploads", headers=headers)).json()
    upload_id = started["upload_id"]
    parts = [b"a" * (5 * 1024 * 1024), b"b" * 1000]  # S3's smallest non-final part is 5 MiB
    etags = []
    async with aiohttp.ClientSession() as bare:
        for number, data in enumerate(parts, start=1):
            resp = await server.client.put(
                f"{url}?partNumber={number}&uploadId={upload_id}",
                data=b"",
                headers=headers,
                allow_redirects=False,
            )
            assert resp.status == 307
            async with bare.put(resp.headers["Location"], data=data) as direct:
                assert direct.status == 200, await direct.text()
                etags.append(direct.headers["ETag"].strip('"'))
    listed = await (await server.client.get(f"{url}?uploadId={upload_id}", headers=headers)).json()
    assert [p["part_number"] for p in listed["parts"]] == [1, 2]
    body = {"parts": [{"part_number": n, "etag": e} for n, e in enumerate(etags, start=1)]}
    done = await server.client.post(f"{url}?uploadId={upload_id}", json=body, headers=headers)
    assert done.status == 200, await done.text()
    assert (await done.json())["size"] == sum(len(p) for p in parts)
    stored = bucket.head_object(Bucket=BUCKET, Key=f"fleet/jobs/{event['job_id']}/big.bin")
    assert stored["ContentLength"] == sum(len(p) for p in parts)


async def test_deleting_a_jobs_artifacts_empties_its_prefix(server: Server, bucket: Any) -> None:
    event = await _job(server)
    await _put_via_redirect(server, event, "a.bin", b"x")
    await event["_worker"].report(event["job_id"], "completed")
    await server.wait_job(event["job_id"], "completed")
    gone = await server.ok("DELETE", f"/api/queue/{event['job_id']}/artifacts")
    assert gone["deleted"] == 1
    left = bucket.list_objects_v2(Bucket=BUCKET, Prefix=f"fleet/jobs/{event['job_id']}/")
    assert left.get("KeyCount", 0) == 0


async def _head_only(server: Server, path: str, token: str, length: int) -> bytes:
    """Send a PUT's headers with Expect: 100-continue and no body; the answer's head."""
    host, port = server.client.host, server.client.port
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"PUT {path} HTTP/1.1\r\nHost: {host}\r\n{TOKEN_HEADER}: {token}\r\n"
        f"Content-Length: {length}\r\nExpect: 100-continue\r\n\r\n".encode()
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    writer.close()
    return head


async def test_expect_100_continue_gets_the_redirect_before_any_body_is_sent(
    server: Server,
) -> None:
    event = await _job(server)
    head = await _head_only(
        server, f"{_base(event)}/big/model.bin", event["upload_token"], 10 * 1024**3
    )
    assert head.startswith(b"HTTP/1.1 307"), head
    assert b"/fleet/jobs/" in head  # the Location: the bucket, not us
    # A manifest still comes through the orchestrator: it is told to go on.
    head = await _head_only(
        server, f"{_base(event)}/checkpoint-1/.tunefleet-manifest.json", event["upload_token"], 10
    )
    assert head.startswith(b"HTTP/1.1 100"), head
    # A bad token is answered by the handler, after 100 Continue: never a redirect.
    head = await _head_only(server, f"{_base(event)}/x.bin", "ut_nope", 10)
    assert head.startswith(b"HTTP/1.1 100"), head


async def test_the_outputs_manifest_gives_direct_uploads_their_checksum(server: Server) -> None:
    event = await _job(server)
    data = b"final weights" * 500
    await _put_via_redirect(server, event, "model.safetensors", data)
    digest = hashlib.sha256(data).hexdigest()

    async def manifest(size: int) -> Any:
        files = [{"key": "model.safetensors", "size": size, "sha256": digest}]
        return await server.client.put(
            f"{_base(event)}/.tunefleet-manifest.json",
            data=json.dumps({"files": files}).encode(),
            headers={TOKEN_HEADER: event["upload_token"]},
        )

    wrong = await manifest(len(data) + 1)
    assert wrong.status == 400 and "not as the manifest says" in (await wrong.json())["detail"]
    assert (await manifest(len(data))).status == 200
    listing = await server.ok("GET", f"/api/queue/{event['job_id']}/artifacts")
    listed = {a["key"]: a["sha256"] for a in listing["artifacts"]}
    assert listed["model.safetensors"] == digest
    assert listing["checkpoints"] == []  # an outputs manifest is no checkpoint


async def test_at_start_uploads_whose_attempt_ended_are_aborted_in_the_bucket(
    make_server: Any, bucket: Any, s3_url: str
) -> None:
    options = {"artifact_store": f"s3://{BUCKET}/fleet", "s3_endpoint_url": s3_url}
    first = await make_server(**options)
    event = await _job(first, max_retries=0)  # a job error would be retried otherwise
    headers = {TOKEN_HEADER: event["upload_token"]}
    url = f"{_base(event)}/unfinished.bin"
    started = await (await first.client.post(url + "?uploads", headers=headers)).json()
    key = f"fleet/jobs/{event['job_id']}/unfinished.bin"

    def open_uploads() -> list[str]:
        listed = bucket.list_multipart_uploads(Bucket=BUCKET, Prefix=key)
        return [u["Key"] for u in listed.get("Uploads", [])]

    assert open_uploads() == [key]
    # As when the upload was started by an earlier process: nothing watches it end.
    first.app[keys.ARTIFACTS]._multipart_jobs.clear()
    await event["_worker"].report(event["job_id"], "failed", error="out of memory")
    await first.wait_job(event["job_id"], "failed")
    await first.client.close()
    assert open_uploads() == [key]
    server = await make_server(**options)
    record = server.store.artifacts.multipart
    for _ in range(250):
        if not open_uploads() and await record(started["upload_id"]) is None:
            break
        await asyncio.sleep(0.02)
    assert open_uploads() == []
    assert await record(started["upload_id"]) is None


async def test_the_json_form_hands_out_a_presigned_url_that_needs_no_token(
    server: Server, bucket: Any
) -> None:
    """What the web UI does: its Content-Security-Policy cannot follow a 307 to the bucket,
    so it asks where the object is and opens that URL itself, without its token."""
    event = await _job(server)
    data = b"bucket bytes" * 500
    await _put_via_redirect(server, event, "final/model one.bin", data)
    path = f"/api/queue/{event['job_id']}/artifacts/final/model%20one.bin"
    link = await server.ok("GET", f"{path}?redirect=false")
    assert (link["key"], link["size"], link["presigned"], link["expires_in"]) == (
        "final/model one.bin",
        len(data),
        True,
        3600,
    )
    assert link["url"].startswith("http://127.0.0.1:") and "/fleet/jobs/" in link["url"]
    async with aiohttp.ClientSession() as bare, bare.get(link["url"]) as got:
        assert got.status == 200 and await got.read() == data
    # A browser opening the URL saves the file rather than leaving the page: S3 answers
    # with this Content-Disposition (moto's server ignores it, so the URL is checked).
    assert parse_qs(urlsplit(link["url"]).query)["response-content-disposition"] == [
        "attachment; filename=\"model one.bin\"; filename*=UTF-8''model%20one.bin"
    ]
    downloads = [e for e in await server.audit() if e["kind"] == "artifact.downloaded"]
    assert [e["detail"]["key"] for e in downloads] == ["final/model one.bin"]


async def test_the_json_form_of_an_object_the_bucket_lacks_is_404(
    server: Server, bucket: Any
) -> None:
    event = await _job(server)
    resp = await server.get(f"/api/queue/{event['job_id']}/artifacts/nope.bin?redirect=false")
    assert resp.status == 404
    assert (await resp.json())["detail"] == "artifact not found: nope.bin"
