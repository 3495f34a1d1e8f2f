"""The agent's upload client against the orchestrator's real upload endpoint, with the
embedded store and with a bucket (moto's standalone S3 server): single and multipart
uploads (presigned parts answer with an ETag header), a checkpoint's manifest, the
listing and the download a retried attempt restores from."""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.moto_s3 import AWS_ENV, moto_server
from tests.server.conftest import Server
from tunefleet.agent.uploads import ArtifactClient

pytestmark = pytest.mark.timeout(120)
BUCKET = "agent-client"


@pytest.fixture(scope="module")
def s3_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("boto3", reason="boto3 is in the test extra")
    with moto_server(tmp_path_factory.mktemp("moto")) as url:
        yield url


@pytest.fixture(params=["embedded", "bucket"])
async def server(
    request: pytest.FixtureRequest, make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> Server:
    if request.param == "embedded":
        return await make_server()  # type: ignore[no-any-return]
    import boto3

    s3_url = request.getfixturevalue("s3_url")
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    client = boto3.client("s3", endpoint_url=s3_url)
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    return await make_server(  # type: ignore[no-any-return]
        artifact_store=f"s3://{BUCKET}/fleet", s3_endpoint_url=s3_url
    )


async def test_the_agent_stores_a_checkpoint_and_a_retry_reads_it_back(
    server: Server, tmp_path: Path
) -> None:
    worker = await server.connected_worker()
    await server.submit(target="worker")
    event = await worker.take_job()
    path = str(server.client.make_url("/api/artifacts"))
    client = ArtifactClient(path, event["upload_token"], multipart_threshold=1024 * 1024)
    data = random.Random(3).randbytes(6 * 1024 * 1024 + 17)
    source = tmp_path / "weights.bin"
    source.write_bytes(data)
    try:
        big = await client.put_file("checkpoint-10/weights.bin", source)  # multipart
        small = await client.put_bytes("checkpoint-10/state.json", b'{"step": 10}')
        files = [{"key": o.key, "size": o.size, "sha256": o.sha256} for o in (big, small)]
        manifest = {"checkpoint": "checkpoint-10", "step": 10, "files": files}
        await client.put_bytes(
            "checkpoint-10/.tunefleet-manifest.json", json.dumps(manifest).encode()
        )
        assert big.sha256 == hashlib.sha256(data).hexdigest()
        listed = {o.key: o for o in await client.list_objects("checkpoint-10/")}
        assert set(listed) == {
            "checkpoint-10/weights.bin",
            "checkpoint-10/state.json",
            "checkpoint-10/.tunefleet-manifest.json",
        }
        assert listed["checkpoint-10/weights.bin"].size == len(data)
        await client.download(listed["checkpoint-10/weights.bin"], tmp_path / "back.bin")
    finally:
        await client.close()
    assert (tmp_path / "back.bin").read_bytes() == data
    detail = await server.ok("GET", f"/api/queue/{event['job_id']}/artifacts")
    assert [c["name"] for c in detail["checkpoints"]] == ["checkpoint-10"]
