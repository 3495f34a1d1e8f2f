"""Artifact keys: paths relative to a job's output directory, checked before any byte moves.

A key is '/'-separated, at most 1,024 bytes of UTF-8, with no empty, '.' or '..' segment,
no leading '/', no backslash and no NUL: whatever a worker sends can never name a file
outside its job's prefix, on disk or in a bucket.
"""

from __future__ import annotations

import re

from tunefleet.errors import BadRequest

MAX_KEY_BYTES = 1024
MANIFEST_NAME = ".tunefleet-manifest.json"
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
_MANIFEST_KEY = re.compile(r"(checkpoint-(\d+))/" + re.escape(MANIFEST_NAME))


def check_key(key: str) -> str:
    """`key` when it is a safe artifact key; BadRequest (400) saying what is wrong."""
    if not key:
        raise BadRequest("empty artifact key: name a path relative to the job's output_dir")
    if "\x00" in key:
        raise BadRequest("artifact key contains a NUL byte; send a plain relative path")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise BadRequest(f"artifact key is over {MAX_KEY_BYTES} bytes; use a shorter path")
    if key.startswith("/"):
        raise BadRequest("artifact key is absolute; send a path relative to the job's output_dir")
    if "\\" in key:
        raise BadRequest("artifact key contains a backslash; separate path segments with '/'")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise BadRequest(
                "artifact key has an empty, '.' or '..' segment; send a normalized relative path"
            )
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix: empty, or a key that may end with '/'."""
    if prefix:
        check_key(prefix.removesuffix("/") or ".")
    return prefix


def manifest_checkpoint(key: str) -> tuple[str, int] | None:
    """(checkpoint name, step) when `key` is a checkpoint's manifest, else None."""
    match = _MANIFEST_KEY.fullmatch(key)
    return (match.group(1), int(match.group(2))) if match else None


def is_manifest(key: str) -> bool:
    """A checkpoint's manifest, or the outputs manifest at the root of the output dir."""
    return key == MANIFEST_NAME or manifest_checkpoint(key) is not None


def checkpoint_step(name: str) -> int | None:
    match = _CHECKPOINT.fullmatch(name)
    return int(match.group(1)) if match else None
