"""The bucket artifact store: any S3-compatible service, through boto3.

Bytes never pass through the orchestrator: workers and users get presigned URLs (a 307
from the upload endpoint) and talk to the bucket directly; the orchestrator only signs,
lists, completes multipart uploads and deletes. Only small manifests are written by the
orchestrator itself. boto3's calls block, so each runs on a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tunefleet.artifacts.store import (
    PRESIGN_TTL_S,
    ByteSource,
    Checks,
    ListedObject,
    PartInfo,
    StoredObject,
)
from tunefleet.errors import BadRequest, NotFound, TunefleetError


class BucketUnavailable(TunefleetError):
    status = 502


class BucketStore:
    presigns = True

    def __init__(self, bucket: str, prefix: str, endpoint_url: str | None) -> None:
        self.bucket = bucket
        self.prefix = prefix
        where = f" at {endpoint_url}" if endpoint_url else ""
        self.describe = f"s3://{bucket}/{prefix}{where}"
        self.client = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            config=Config(signature_version="s3v4", retries={"mode": "standard"}),
        )

    def _object(self, job_id: str, key: str) -> str:
        base = f"{self.prefix}/jobs/{job_id}" if self.prefix else f"jobs/{job_id}"
        return f"{base}/{key}" if key else base + "/"

    async def _call(self, name: str, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(partial(getattr(self.client, name), **kwargs))
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NoSuchUpload"):
                raise NotFound(f"not in the bucket ({code})") from None
            if code in ("InvalidPart", "InvalidPartOrder", "BadDigest", "EntityTooSmall"):
                raise BadRequest(f"the bucket refused the upload: {code}") from None
            raise BucketUnavailable(f"the artifact bucket answered {code or 'an error'}") from None
        except BotoCoreError as error:
            raise BucketUnavailable(
                f"the artifact bucket cannot be reached: {type(error).__name__}"
            ) from None

    # --- presigned URLs -------------------------------------------------------------------

    def _presign(self, method: str, **params: Any) -> str:
        return str(
            self.client.generate_presigned_url(
                method, Params={"Bucket": self.bucket, **params}, ExpiresIn=PRESIGN_TTL_S
            )
        )

    def presign_get(self, job_id: str, key: str) -> str:
        # attachment: a browser that opens the URL saves the file instead of leaving the page.
        return self._presign(
            "get_object",
            Key=self._object(job_id, key),
            ResponseContentDisposition=attachment(key.rsplit("/", 1)[-1]),
        )

    def presign_put(self, job_id: str, key: str, checks: Checks) -> str:
        return self._presign("put_object", Key=self._object(job_id, key))

    def presign_part(self, job_id: str, key: str, backend_id: str | None, number: int) -> str:
        return self._presign(
            "upload_part", Key=self._object(job_id, key), UploadId=backend_id, PartNumber=number
        )

    def local_path(self, job_id: str, key: str) -> Path | None:
        return None

    # --- what the orchestrator writes and reads itself ------------------------------------

    async def put(self, job_id: str, key: str, body: ByteSource, checks: Checks) -> StoredObject:
        raise NotImplementedError("workers PUT to the bucket through presigned URLs")

    async def put_bytes(self, job_id: str, key: str, data: bytes) -> StoredObject:
        await self._call("put_object", Bucket=self.bucket, Key=self._object(job_id, key), Body=data)
        return StoredObject(len(data), hashlib.sha256(data).hexdigest())

    async def read_bytes(self, job_id: str, key: str, limit: int) -> bytes:
        answer = await self._call(
            "get_object",
            Bucket=self.bucket,
            Key=self._object(job_id, key),
            Range=f"bytes=0-{limit - 1}",
        )
        return bytes(await asyncio.to_thread(answer["Body"].read))

    async def list_objects(self, job_id: str, prefix: str = "") -> list[ListedObject]:
        base = self._object(job_id, "")
        found: list[ListedObject] = []
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            page = await self._call(
                "list_objects_v2", Bucket=self.bucket, Prefix=base + prefix, **extra
            )
            for item in page.get("Contents", []):
                found.append(ListedObject(item["Key"][len(base) :], int(item["Size"])))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return found

    async def delete_prefix(self, job_id: str, prefix: str = "") -> None:
        listed = await self.list_objects(job_id, prefix)
        for start in range(0, len(listed), 1000):  # DeleteObjects takes 1,000 at a time
            batch = [{"Key": self._object(job_id, o.key)} for o in listed[start : start + 1000]]
            await self._call(
                "delete_objects", Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
            )

    # --- multipart ------------------------------------------------------------------------

    async def start_multipart(self, job_id: str, key: str, upload_id: str) -> str | None:
        answer = await self._call(
            "create_multipart_upload", Bucket=self.bucket, Key=self._object(job_id, key)
        )
        return str(answer["UploadId"])

    async def put_part(
        self, upload_id: str, number: int, body: ByteSource, checks: Checks
    ) -> PartInfo:
        raise NotImplementedError("workers PUT parts to the bucket through presigned URLs")

    async def list_parts(
        self, job_id: str, key: str, upload_id: str, backend_id: str | None
    ) -> list[PartInfo]:
        answer = await self._call(
            "list_parts", Bucket=self.bucket, Key=self._object(job_id, key), UploadId=backend_id
        )
        return [
            PartInfo(int(p["PartNumber"]), str(p["ETag"]).strip('"'), int(p["Size"]))
            for p in answer.get("Parts", [])
        ]

    async def parts_on_disk(self, upload_id: str) -> int:
        return 0  # the parts are in the bucket

    async def complete_multipart(
        self,
        job_id: str,
        key: str,
        upload_id: str,
        backend_id: str | None,
        parts: list[tuple[int, str]],
    ) -> StoredObject:
        name = self._object(job_id, key)
        await self._call(
            "complete_multipart_upload",
            Bucket=self.bucket,
            Key=name,
            UploadId=backend_id,
            MultipartUpload={
                "Parts": [
                    {"PartNumber": n, "ETag": f'"{etag.strip(chr(34))}"'} for n, etag in parts
                ]
            },
        )
        head = await self._call("head_object", Bucket=self.bucket, Key=name)
        return StoredObject(int(head["ContentLength"]), None)

    async def abort_multipart(
        self, job_id: str, key: str, upload_id: str, backend_id: str | None
    ) -> None:
        await self._call(
            "abort_multipart_upload",
            Bucket=self.bucket,
            Key=self._object(job_id, key),
            UploadId=backend_id,
        )

    async def sweep_leftovers(self, open_uploads: set[str]) -> tuple[int, int]:
        # Nothing is staged here: the bucket writes whole objects, and its unfinished
        # multipart uploads are aborted through their records (Artifacts.tidy).
        return 0, 0


def attachment(filename: str) -> str:
    """A Content-Disposition that saves as `filename` (RFC 6266: an ASCII fallback, and the
    exact name percent-encoded)."""
    fallback = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename
    )
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"
