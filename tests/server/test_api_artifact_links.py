"""GET /api/queue/{id}/artifacts/{key}?redirect=false with the embedded store: the answer
says where to fetch the object (this same path, with the bearer token) instead of
sending it, and bad requests say what to send. The bucket form is in
tests/artifacts/test_artifact_bucket.py."""

from __future__ import annotations

import hashlib

from tests.server.conftest import Server
from tests.server.test_api_artifacts import Uploader, dispatched


async def test_the_json_form_names_this_path_and_the_download_works_there(
    server: Server,
) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    data = b"weights" * 100
    await up.stored("final/model one.bin", data)
    path = f"/api/queue/{up.job_id}/artifacts/final/model%20one.bin"
    link = await server.ok("GET", f"{path}?redirect=false")
    assert link == {
        "key": "final/model one.bin",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "url": path,
        "presigned": False,
        "expires_in": None,
    }
    # Only fetching the bytes is a download.
    downloads = [e for e in await server.audit() if e["kind"] == "artifact.downloaded"]
    assert downloads == []
    got = await server.get(link["url"])
    assert got.status == 200 and await got.read() == data
    assert (await server.get(f"{path}?redirect=true")).status == 200


async def test_the_json_form_refuses_a_bad_redirect_value_and_a_missing_object(
    server: Server,
) -> None:
    worker = await server.connected_worker()
    up = Uploader(server, await dispatched(server, worker))
    await up.stored("model.bin", b"x")
    bad = await server.get(f"/api/queue/{up.job_id}/artifacts/model.bin?redirect=maybe")
    assert bad.status == 400
    assert (await bad.json())["detail"] == "redirect: must be true or false"
    missing = await server.get(f"/api/queue/{up.job_id}/artifacts/nope.bin?redirect=false")
    assert missing.status == 404
    assert (await missing.json())["detail"] == "artifact not found: nope.bin"
    unknown_job = await server.get("/api/queue/j_nope/artifacts/model.bin?redirect=false")
    assert unknown_job.status == 404
    anonymous = await server.get(
        f"/api/queue/{up.job_id}/artifacts/model.bin?redirect=false", headers={}
    )
    assert anonymous.status == 401
