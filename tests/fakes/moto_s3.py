"""A real S3 API server process for tests: moto's standalone server (``moto_server``, from
``moto[server]`` in the test extra) on a free loopback port. Skips, saying why, when it
is not installed or does not start."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def moto_server(log_dir: Path) -> Iterator[str]:
    """The server's URL while it runs."""
    venv_binary = Path(__file__).parents[2] / ".venv" / "bin" / "moto_server"
    binary = shutil.which("moto_server") or str(venv_binary)
    if not Path(binary).exists():
        pytest.skip("moto_server not found: pip install -e '.[test]' (it brings moto[server])")
    port = _free_port()
    log = (log_dir / "moto.log").open("wb")
    process = subprocess.Popen(
        [binary, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                log.close()
                pytest.skip(f"moto_server did not start on port {port} (see {log.name})")
            time.sleep(0.2)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def create_bucket(url: str, name: str) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=url, **_credentials())
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=name)


def _credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": AWS_ENV["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        "region_name": AWS_ENV["AWS_DEFAULT_REGION"],
    }
