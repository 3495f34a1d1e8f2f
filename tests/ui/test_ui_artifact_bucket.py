"""With a bucket artifact store, the job page's Download saves the file from the bucket:
the page asks the orchestrator where it is (?redirect=false) and opens the presigned URL
as a link, which its Content-Security-Policy (connect-src 'self') allows, without
sending its token to the bucket. The bucket is moto's standalone S3 server."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Orchestrator
from tests.fakes.moto_s3 import AWS_ENV, moto_server
from tests.ui.browser_support import INSTALL_HINT, PageProblems, sign_in

expect = pytest.importorskip("playwright.sync_api", reason=INSTALL_HINT).expect
boto3 = pytest.importorskip("boto3", reason="boto3 is in the test extra: pip install -e '.[test]'")

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

BUCKET = "tunefleet-ui"


@pytest.fixture
def bucket_orchestrator(
    tmp_path: Path, ui_configs: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Orchestrator, Any, str]]:
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)  # the orchestrator process inherits them
    with moto_server(tmp_path) as s3_url:
        client = boto3.client("s3", endpoint_url=s3_url)
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=BUCKET)
        store = ["--artifact-store", f"s3://{BUCKET}/fleet", "--s3-endpoint-url", s3_url]
        orch = Orchestrator(tmp_path / "data", ui_configs, extra_args=store).start()
        try:
            yield orch, client, s3_url
        finally:
            orch.kill()  # see the orchestrator fixture: a clean stop waits for the page


def test_download_from_a_bucket_opens_the_presigned_url_without_the_token(
    page: Any,
    bucket_orchestrator: tuple[Orchestrator, Any, str],
    problems: PageProblems,
    tmp_path: Path,
) -> None:
    orchestrator, client, s3_url = bucket_orchestrator
    job_id = orchestrator.submit(
        config_name="tiny-quick", target="worker", worker_labels={"suite": uuid.uuid4().hex}
    )["job_id"]
    # A trainer wrote it straight into the bucket; the orchestrator lists the bucket.
    data = b"weights in a bucket" * 100
    client.put_object(Bucket=BUCKET, Key=f"fleet/jobs/{job_id}/model.bin", Body=data)
    to_bucket: list[dict[str, str]] = []
    page.on(
        "request",
        lambda request: request.url.startswith(s3_url) and to_bucket.append(request.headers),
    )

    sign_in(page, orchestrator, route=f"#/jobs/{job_id}")
    row = page.locator('#job-artifacts tr[data-key="model.bin"]')
    with page.expect_download() as download_info:
        row.get_by_role("button", name="Download model.bin").click()
    download = download_info.value
    assert download.url.startswith(f"{s3_url}/{BUCKET}/fleet/jobs/{job_id}/model.bin?")
    saved = tmp_path / "model.bin"
    download.save_as(saved)
    assert saved.read_bytes() == data
    assert to_bucket and all("authorization" not in headers for headers in to_bucket)
    expect(row.get_by_role("button", name="Download model.bin")).to_be_enabled()
    assert problems.unexpected() == []  # nothing blocked by the page's CSP
