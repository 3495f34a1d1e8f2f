"""The artifact client against a fake store that speaks the contract: streamed PUTs,
multipart that resumes after an outage, presigned redirects without the token, Range
downloads, checksums, and the errors a user reads."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.artifact_store import TOKEN, FakeStore, start_fake_store
from tunefleet.agent.backoff import Backoff
from tunefleet.agent.uploads import (
    ArtifactClient,
    StoredObject,
    StoreUnreachable,
    UploadRefused,
    retrying,
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[tuple[FakeStore, str]]:
    fake = FakeStore(tmp_path / "store", part_size=256 * 1024)
    runner, endpoint = await start_fake_store(fake)
    yield fake, endpoint
    await runner.cleanup()


def client_for(endpoint: str, **kwargs: object) -> ArtifactClient:
    options: dict[str, object] = {"multipart_threshold": 512 * 1024, "chunk_bytes": 64 * 1024}
    options.update(kwargs)
    return ArtifactClient(endpoint, TOKEN, **options)  # type: ignore[arg-type]


def random_file(path: Path, size: int) -> str:
    data = random.Random(size).randbytes(size)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


async def test_a_small_file_goes_up_in_one_put_with_its_length(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    sha = random_file(tmp_path / "model.bin", 300 * 1024)
    client = client_for(endpoint)
    try:
        stored = await client.put_file("model.bin", tmp_path / "model.bin")
    finally:
        await client.close()
    assert stored == StoredObject("model.bin", 300 * 1024, sha)
    assert fake.sha256("model.bin") == sha
    assert [m for m, _ in fake.requests] == ["PUT"]  # Content-Length given: never chunked
    assert fake.max_body_chunk <= 64 * 1024 + 16 * 1024  # streamed in chunks, not whole


async def test_a_large_file_goes_up_in_parts_and_resumes_after_an_outage(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    size = 256 * 1024 * 4 + 1000  # five parts, the last one short
    sha = random_file(tmp_path / "big.bin", size)
    client = client_for(endpoint)
    fake.drop_next = 0
    try:
        original = client._send

        calls = 0

        async def flaky(method: str, url: str, what: str, **kw: object):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            if "partNumber=3" in url and calls < 10:
                raise StoreUnreachable("connection lost (injected)")
            return await original(method, url, what, **kw)  # type: ignore[arg-type]

        client._send = flaky  # type: ignore[method-assign]
        with pytest.raises(StoreUnreachable):
            await client.put_file("ckpt/big.bin", tmp_path / "big.bin")
        client._send = original  # type: ignore[method-assign]
        stored = await client.put_file("ckpt/big.bin", tmp_path / "big.bin")
    finally:
        await client.close()
    assert stored.sha256 == sha == fake.sha256("ckpt/big.bin")
    parts = [p for m, p in fake.requests if m == "PUT"]
    assert sum("partNumber=1&" in p for p in parts) == 1  # parts 1-2 were not sent again
    assert sum("partNumber=2&" in p for p in parts) == 1
    assert "GET" in [m for m, p in fake.requests if "uploadId" in p and "partNumber" not in p]


async def test_retrying_waits_out_a_store_that_answers_503(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    sha = random_file(tmp_path / "a.bin", 1000)
    fake.fail_next = 3
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    client = client_for(endpoint)
    try:
        stored = await retrying(
            lambda: client.put_file("a.bin", tmp_path / "a.bin"),
            Backoff(0.5, 4.0, rng=random.Random(1)),
            what="a.bin",
            sleep=sleep,
        )
    finally:
        await client.close()
    assert stored.sha256 == sha
    assert len(slept) == 3


async def test_a_dropped_connection_mid_body_is_retryable(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    random_file(tmp_path / "a.bin", 200 * 1024)
    fake.drop_next = 1
    client = client_for(endpoint)
    try:
        with pytest.raises(StoreUnreachable):
            await client.put_file("a.bin", tmp_path / "a.bin")
        await client.put_file("a.bin", tmp_path / "a.bin")
    finally:
        await client.close()
    assert fake.stored_keys() == ["a.bin"]


async def test_a_refused_token_and_a_full_disk_are_final_and_say_why(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    random_file(tmp_path / "a.bin", 1000)
    wrong = ArtifactClient(endpoint, "ut_wrong")
    try:
        with pytest.raises(UploadRefused) as refused:
            await wrong.put_file("a.bin", tmp_path / "a.bin")
    finally:
        await wrong.close()
    assert refused.value.status == 401
    assert "attempt ended" in str(refused.value)
    assert "ut_wrong" not in str(refused.value)
    fake.refuse_status = 507
    client = client_for(endpoint)
    try:
        with pytest.raises(UploadRefused) as full:
            await client.put_file("a.bin", tmp_path / "a.bin")
    finally:
        await client.close()
    assert full.value.status == 507
    assert "no space" in str(full.value)


async def test_a_presigned_redirect_gets_the_body_again_and_never_the_token(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    fake.redirect = True
    sha = random_file(tmp_path / "a.bin", 100 * 1024)
    client = client_for(endpoint)
    try:
        stored = await client.put_file("out/a.bin", tmp_path / "a.bin")
        await client.download(stored, tmp_path / "back" / "a.bin")
    finally:
        await client.close()
    assert fake.sha256("out/a.bin") == sha  # the fake refuses a presigned call with a token
    assert hashlib.sha256((tmp_path / "back" / "a.bin").read_bytes()).hexdigest() == sha


async def test_listing_and_a_download_that_continues_with_range(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    _, endpoint = store
    sha = random_file(tmp_path / "src" / "w.bin", 700 * 1024)
    client = client_for(endpoint)
    try:
        await client.put_file("checkpoint-20/w.bin", tmp_path / "src" / "w.bin")
        await client.put_bytes("checkpoint-20/.tunefleet-manifest.json", b"{}")
        await client.put_bytes("checkpoint-200/x", b"x")
        listed = await client.list_objects("checkpoint-20/")
        assert sorted(o.key for o in listed) == [
            "checkpoint-20/.tunefleet-manifest.json",
            "checkpoint-20/w.bin",
        ]
        item = next(o for o in listed if o.key.endswith("w.bin"))
        dest = tmp_path / "dst" / "w.bin"
        dest.parent.mkdir()
        # An earlier try left the first 100 KiB behind.
        dest.with_name("w.bin.part").write_bytes((tmp_path / "src" / "w.bin").read_bytes()[:102400])
        await client.download(item, dest)
    finally:
        await client.close()
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha
    assert not dest.with_name("w.bin.part").exists()


async def test_a_download_whose_checksum_differs_is_thrown_away(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    _, endpoint = store
    random_file(tmp_path / "w.bin", 1000)
    client = client_for(endpoint)
    try:
        stored = await client.put_file("w.bin", tmp_path / "w.bin")
        lying = StoredObject(stored.key, stored.size, "0" * 64)
        with pytest.raises(StoreUnreachable, match="different checksum"):
            await client.download(lying, tmp_path / "out" / "w.bin")
    finally:
        await client.close()
    assert not (tmp_path / "out" / "w.bin").exists()
    assert not (tmp_path / "out" / "w.bin.part").exists()


async def test_a_file_that_changes_while_uploading_is_sent_again(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    _, endpoint = store
    path = tmp_path / "a.bin"
    random_file(path, 200 * 1024)
    client = client_for(endpoint)
    original = client._chunks

    async def touching(p: Path, offset: int, length: int, digest: object):  # type: ignore[no-untyped-def]
        # Changed as soon as its first chunk is read, so surely before the upload ends: a
        # change after the last chunk could come after the store's answer (or never, when
        # the writer is done with the body once its length is sent).
        touched = False
        async for chunk in original(p, offset, length, digest):
            if not touched:
                os.utime(p, ns=(1, 1))
                touched = True
            yield chunk

    client._chunks = touching  # type: ignore[method-assign]
    try:
        with pytest.raises(StoreUnreachable, match="changed while"):
            await client.put_file("a.bin", path)
    finally:
        await client.close()


async def test_unreachable_store_is_retryable_and_names_no_token(tmp_path: Path) -> None:
    random_file(tmp_path / "a.bin", 10)
    client = ArtifactClient("http://127.0.0.1:9/api/artifacts", TOKEN, connect_timeout_s=1)
    try:
        with pytest.raises(StoreUnreachable) as error:
            await asyncio.wait_for(client.put_file("a.bin", tmp_path / "a.bin"), 10)
    finally:
        await client.close()
    assert TOKEN not in str(error.value)


async def test_a_part_stored_whose_answer_was_lost_is_not_sent_again(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    size = 256 * 1024 * 3 + 10
    sha = random_file(tmp_path / "big.bin", size)
    client = client_for(endpoint)
    original = client._send
    lost = False

    async def answer_lost(method: str, url: str, what: str, **kw: object):  # type: ignore[no-untyped-def]
        nonlocal lost
        reply = await original(method, url, what, **kw)  # type: ignore[arg-type]
        if "partNumber=2&" in url and not lost:
            lost = True
            raise StoreUnreachable("connection lost after the part was stored (injected)")
        return reply

    client._send = answer_lost  # type: ignore[method-assign]
    try:
        with pytest.raises(StoreUnreachable):
            await client.put_file("big.bin", tmp_path / "big.bin")
        stored = await client.put_file("big.bin", tmp_path / "big.bin")
    finally:
        await client.close()
    assert stored.sha256 == sha == fake.sha256("big.bin")
    parts = [p for m, p in fake.requests if m == "PUT"]
    assert sum("partNumber=2&" in p for p in parts) == 1


async def test_an_advertised_endpoint_that_cannot_be_reached_falls_back_to_the_agents_url(
    store: tuple[FakeStore, str], tmp_path: Path
) -> None:
    fake, endpoint = store
    sha = random_file(tmp_path / "a.bin", 1000)
    unreachable = "http://127.0.0.1:9/api/artifacts"  # e.g. a wrong --advertise-url

    async def no_wait(delay: float) -> None:
        return None

    client = ArtifactClient(unreachable, TOKEN, fallback_endpoint=endpoint, connect_timeout_s=2)
    try:
        stored = await retrying(
            lambda: client.put_file("a.bin", tmp_path / "a.bin"),
            Backoff(0.01, 0.02),
            what="a.bin",
            sleep=no_wait,
        )
    finally:
        await client.close()
    assert stored.sha256 == sha == fake.sha256("a.bin")
    assert client.endpoint == endpoint


def test_the_plan_knows_the_orchestrator_url_as_a_fallback() -> None:
    from tunefleet.agent.job_artifacts import artifact_plan
    from tunefleet.agent.job_events import ArtifactPlan
    from tunefleet.protocol.events import JobSubmitEvent

    def plan_of(base_url: str = "http://x", **fields: object) -> ArtifactPlan | None:
        return artifact_plan(JobSubmitEvent.model_validate({"job_id": "j_1", **fields}), base_url)

    submit = {
        "upload_endpoint": "http://gpu-head.internal:8001/api/artifacts",
        "upload_token": TOKEN,
        "resume_checkpoint": "checkpoint-200",
    }
    plan = plan_of(**submit, base_url="https://orch.example.com:8443")
    assert plan is not None
    assert plan.endpoint == "http://gpu-head.internal:8001/api/artifacts"
    assert plan.fallback_endpoint == "https://orch.example.com:8443/api/artifacts"
    assert plan.resume_checkpoint == "checkpoint-200"
    same = plan_of(
        **{**submit, "upload_endpoint": "https://orch.example.com:8443/api/artifacts"},
        base_url="https://orch.example.com:8443",
    )
    assert same is not None and same.fallback_endpoint is None
    assert plan_of(**{**submit, "upload_endpoint": ""}) is None
    # SimpleTuner's agent fails on a null token; a tunefleet agent reads it as none.
    assert plan_of(**{**submit, "upload_token": None}) is None


async def test_a_failed_download_names_the_object_not_a_presigned_url() -> None:
    client = ArtifactClient("http://127.0.0.1:9/api/artifacts", TOKEN, connect_timeout_s=1)
    presigned = "http://127.0.0.1:9/bucket/w.bin?X-Amz-Signature=s3cr3t"
    try:
        with pytest.raises(StoreUnreachable) as error:
            async with client._open("GET", presigned, {}):
                pass
    finally:
        await client.close()
    assert "s3cr3t" not in str(error.value)
    assert "w.bin" in str(error.value)
