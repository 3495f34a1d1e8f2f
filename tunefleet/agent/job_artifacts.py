"""One job attempt's artifacts: restore the checkpoint to resume from before the trainer
starts, store each new checkpoint while it runs, store the final outputs after it exits
(docs/job-contract.md, "Outputs, checkpoints and resuming").

What is stored is the trainer's output directory (the config's ``output_dir``), each file
under its path relative to that directory. A checkpoint is a ``checkpoint-<step>/``
directory; it counts as complete once its files are unchanged between two scans (or the
trainer has exited), and it is stored files first, its manifest
``checkpoint-<step>/.tunefleet-manifest.json`` last: the store trusts a checkpoint only
once the manifest is there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import structlog

from tunefleet.agent.backoff import Backoff
from tunefleet.agent.job_events import ArtifactPlan
from tunefleet.agent.job_files import with_keys
from tunefleet.agent.uploads import (
    MULTIPART_THRESHOLD,
    ArtifactClient,
    StoredObject,
    UploadRefused,
    file_sha256,
    retrying,
)
from tunefleet.protocol.endpoints import OutputsReport
from tunefleet.protocol.events import JobSubmitEvent

log = structlog.get_logger(__name__)

MANIFEST_NAME = ".tunefleet-manifest.json"
DEFAULT_OUTPUT_DIR = "output"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_MAX_KEY_BYTES = 1024

Note = Callable[[str], None]
Snapshot = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class ArtifactOptions:
    """How the agent stores a job's artifacts (the executor's settings)."""

    # How often the output directory is scanned for new checkpoints: a checkpoint is
    # stored 1-2 scans after its last write, so a worker lost then loses at most that.
    poll_s: float = 1.0
    tls: ssl.SSLContext | bool = True
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    multipart_threshold: int = MULTIPART_THRESHOLD
    # A cancelled job's last checkpoint gets this long (inside the agent's 30 s stop).
    cancelled_upload_s: float = 20.0


def artifact_plan(event: JobSubmitEvent, base_url: str) -> ArtifactPlan | None:
    """Where the job's outputs go, from ``upload_endpoint`` (absolute, or a path on the
    orchestrator) and ``upload_token``; None when the job_submit carries no endpoint or
    no token (SimpleTuner's server sends ``""``)."""
    endpoint, token = event.upload_endpoint, event.upload_token
    if not (endpoint and token):
        return None
    fallback = None
    if not endpoint.startswith(("http://", "https://")):
        endpoint = base_url + endpoint
    elif base_url:
        advertised = urlsplit(endpoint)
        fallback = base_url.rstrip("/") + advertised.path
        if urlsplit(fallback)[:2] == advertised[:2]:
            fallback = None  # the same host: nothing else to try
    return ArtifactPlan(endpoint, token, event.resume_checkpoint, fallback)


def upload_env(plan: ArtifactPlan | None) -> dict[str, str]:
    """The trainer's view of the plan: SimpleTuner's variables and tunefleet's."""
    if plan is None:
        return {}
    return {
        f"{prefix}_UPLOAD_{name}": value
        for prefix in ("SIMPLETUNER", "TUNEFLEET")
        for name, value in (("ENDPOINT", plan.endpoint), ("TOKEN", plan.token))
    }


def output_dir_of(config: Mapping[str, Any]) -> str | None:
    for key in ("output_dir", "--output_dir"):
        value = config.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def plan_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config a job with an upload endpoint runs with: one that names its output_dir
    (``output``, inside the attempt's directory, when it names none)."""
    if output_dir_of(config) is not None:
        return dict(config)
    return with_keys(config, output_dir=DEFAULT_OUTPUT_DIR)


def checkpoint_step(name: str) -> int | None:
    match = _CHECKPOINT.match(name)
    return int(match.group(1)) if match else None


class JobArtifacts:
    """The artifacts of one attempt: ``restore()``, then ``start_watching()`` while the
    trainer runs, then ``finish()``; ``close()`` always."""

    def __init__(
        self,
        plan: ArtifactPlan,
        output_dir: Path,
        *,
        options: ArtifactOptions | None = None,
        note: Note = lambda text: None,
        client: ArtifactClient | None = None,
    ) -> None:
        self.plan = plan
        self.output_dir = output_dir
        self.options = options or ArtifactOptions()
        self.note = note
        self.client = client or ArtifactClient(
            plan.endpoint,
            plan.token,
            tls=self.options.tls,
            multipart_threshold=self.options.multipart_threshold,
            fallback_endpoint=plan.fallback_endpoint,
        )
        self.stored_keys = 0
        self.stored_bytes = 0
        self.checkpoints_stored: list[str] = []
        self.restored: str | None = None  # the checkpoint the trainer resumes from
        self.refused: UploadRefused | None = None
        self._files: dict[str, tuple[int, int]] = {}  # key -> (size, mtime_ns) as stored
        self._sha: dict[str, str] = {}
        self._seen: dict[str, Snapshot] = {}
        self._stop = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self._log = log.bind(output_dir=str(output_dir))

    async def close(self) -> None:
        if self._watcher is not None and not self._watcher.done():
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watcher
        await self.client.close()

    # --- before the trainer starts -----------------------------------------------------

    async def restore(self) -> str | None:
        """Download the plan's ``resume_checkpoint`` into the output directory; its name,
        or None when there is none to resume from (the trainer then starts fresh)."""
        name = self.plan.resume_checkpoint
        if not name:
            return None
        if checkpoint_step(name) is None:
            self.note(f"resume checkpoint {name!r} is not a checkpoint-<step> name; starting fresh")
            return None
        try:
            prefix = f"{name}/"
            listed = await self._retrying(lambda: self.client.list_objects(prefix), prefix)
            files = [o for o in listed if PurePosixPath(o.key).name != MANIFEST_NAME]
            if len(files) == len(listed):
                self.note(f"checkpoint {name} is incomplete in the store; starting fresh")
                return None
            for item in files:
                await self._restore_file(item)
        except UploadRefused as error:
            self.note(f"cannot restore {name} ({error}); starting fresh")
            return None
        total = sum(o.size for o in files)
        self.checkpoints_stored.append(name)
        self.restored = name
        self.note(f"restored {name} from the artifact store ({len(files)} files, {total} bytes)")
        return name

    async def _restore_file(self, item: StoredObject) -> None:
        dest = self._local_path(item.key)
        if dest is None:
            raise UploadRefused(400, f"the store listed an unsafe key {item.key!r}", "restore")
        if dest.is_file() and dest.stat().st_size == item.size:
            same = await asyncio.to_thread(file_sha256, dest)
            if same == item.sha256:
                self._remember(item.key, dest)
                return
        await self._retrying(lambda: self.client.download(item, dest), f"download of {item.key}")
        self._remember(item.key, dest)

    # --- while it runs ------------------------------------------------------------------

    def start_watching(self) -> None:
        self._watcher = asyncio.create_task(self._watch(), name="job-artifacts-watch")

    async def _watch(self) -> None:
        while not self._stop.is_set():
            newest = await asyncio.to_thread(self._newest_settled)
            if newest is not None and self.refused is None:
                try:
                    await self._store_checkpoint(newest)
                except UploadRefused as error:
                    self.refused = error
                    self._log.warning("checkpoint not stored", error=str(error))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.options.poll_s)

    def _newest_settled(self) -> str | None:
        """The newest checkpoint not yet stored whose files did not change since the
        last scan (the trainer is done writing it)."""
        for name in self._checkpoints(newest_first=True):
            if name in self.checkpoints_stored:
                return None  # older ones than a stored one are not worth storing
            snapshot = _snapshot(self.output_dir / name)
            settled = snapshot and self._seen.get(name) == snapshot
            self._seen[name] = snapshot
            if settled:
                return name
        return None

    # --- after it exits -----------------------------------------------------------------

    async def finish(self, completed: bool) -> dict[str, Any]:
        """Store what is left: the newest checkpoint, and when the trainer ``completed``,
        every other output. Returns the ``outputs`` of the status report; raises
        UploadRefused when the store refused (then nothing more is tried)."""
        self._stop.set()
        if self._watcher is not None:
            await self._watcher
        if self.refused is not None:
            raise self.refused
        names = self._checkpoints(newest_first=True)
        if names and names[0] not in self.checkpoints_stored:
            await self._store_checkpoint(names[0])
        if completed:
            skip = frozenset(names)
            entries = []
            for key, path in self._files_under(self.output_dir, skip_dirs=skip):
                stored = await self._store_file(key, path)
                if stored.sha256:
                    entries.append(_entry(stored))
            if entries:
                # Last: it gives files put straight into a bucket their recorded SHA-256.
                await self._put_manifest(MANIFEST_NAME, {"files": entries}, "outputs manifest")
        report = OutputsReport.model_construct(
            stored=True, keys=self.stored_keys, bytes=self.stored_bytes
        )
        return report.model_dump(exclude_unset=True)

    # --- storing ------------------------------------------------------------------------

    async def _store_checkpoint(self, name: str) -> None:
        directory = self.output_dir / name
        entries: list[dict[str, Any]] = []
        try:
            for key, path in self._files_under(directory, prefix=name):
                entries.append(_entry(await self._store_file(key, path)))
        except FileNotFoundError:
            # The trainer's own retention (checkpoints_total_limit) removed it meanwhile.
            self._log.info("checkpoint vanished while it was stored", checkpoint=name)
            return
        manifest = {"checkpoint": name, "step": checkpoint_step(name), "files": entries}
        await self._put_manifest(f"{name}/{MANIFEST_NAME}", manifest, f"manifest of {name}")
        self.checkpoints_stored.append(name)
        size = sum(int(e["size"]) for e in entries)
        self._log.info("checkpoint stored", checkpoint=name, files=len(entries), bytes=size)

    async def _put_manifest(self, key: str, manifest: dict[str, Any], what: str) -> None:
        data = json.dumps(manifest, indent=2).encode()
        await self._retrying(lambda: self.client.put_bytes(key, data), what)

    async def _store_file(self, key: str, path: Path) -> StoredObject:
        stat = await asyncio.to_thread(path.stat)
        if self._files.get(key) == (stat.st_size, stat.st_mtime_ns):
            return StoredObject(key, stat.st_size, self._sha.get(key, ""))
        stored = await self._retrying(lambda: self.client.put_file(key, path), f"upload of {key}")
        self._files[key] = (stat.st_size, stat.st_mtime_ns)
        self._sha[key] = stored.sha256
        self.stored_keys += 1
        self.stored_bytes += stored.size
        return stored

    # --- plumbing -----------------------------------------------------------------------

    def _remember(self, key: str, path: Path) -> None:
        stat = path.stat()
        self._files[key] = (stat.st_size, stat.st_mtime_ns)

    async def _retrying(self, operation: Callable[[], Any], what: str) -> Any:
        backoff = Backoff(self.options.backoff_base_s, self.options.backoff_max_s)
        return await retrying(operation, backoff, what=what)

    def _checkpoints(self, *, newest_first: bool) -> list[str]:
        try:
            names = [p.name for p in self.output_dir.iterdir() if p.is_dir()]
        except OSError:
            return []
        found = [(step, n) for n in names if (step := checkpoint_step(n)) is not None]
        return [n for _, n in sorted(found, reverse=newest_first)]

    def _files_under(
        self, directory: Path, *, prefix: str = "", skip_dirs: frozenset[str] = frozenset()
    ) -> list[tuple[str, Path]]:
        """(key, path) of every file below ``directory``, skipping names that start with a
        dot at its top (a trainer's scratch, e.g. a checkpoint being written)."""
        found: list[tuple[str, Path]] = []
        if not directory.is_dir():
            return found
        for root, dirs, files in os.walk(directory):
            here = Path(root)
            top = here == directory
            dirs[:] = sorted(d for d in dirs if not (top and (d.startswith(".") or d in skip_dirs)))
            for name in sorted(files):
                if top and name.startswith(".") and not prefix:
                    continue
                if name.endswith(".part") or name == MANIFEST_NAME:
                    continue
                rel = (here / name).relative_to(directory).as_posix()
                key = f"{prefix}/{rel}" if prefix else rel
                if _safe_key(key):
                    found.append((key, here / name))
                else:
                    self._log.warning("not storing a file whose name is not a safe key", key=key)
        return found

    def _local_path(self, key: str) -> Path | None:
        if not _safe_key(key):
            return None
        return self.output_dir.joinpath(*PurePosixPath(key).parts)


def _entry(stored: StoredObject) -> dict[str, Any]:
    return {"key": stored.key, "size": stored.size, "sha256": stored.sha256}


def _safe_key(key: str) -> bool:
    parts = PurePosixPath(key).parts
    return (
        bool(parts)
        and not key.startswith("/")
        and "\x00" not in key
        and ".." not in parts
        and len(key.encode()) <= _MAX_KEY_BYTES
    )


def _snapshot(directory: Path) -> Snapshot:
    entries: list[tuple[str, int, int]] = []
    for root, _, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                stat = os.stat(os.path.join(root, name))
                entries.append((os.path.join(root, name), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(entries))
