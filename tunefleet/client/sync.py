"""``Client``: the orchestrator's API for notebooks, scripts and pipelines (docs/client.md).

Synchronous, typed, and the same underneath as the command line: the same connection
settings and environment variables, the same failover between orchestrators, the same
errors.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, cast, overload

from tunefleet.client import operations as ops
from tunefleet.client.backoff import FACTOR, INITIAL_S, MAX_S
from tunefleet.client.connection import Connection
from tunefleet.client.errors import PYTHON_SPELLING, JobFailed
from tunefleet.client.local_config import resolve
from tunefleet.client.loop import LoopThread
from tunefleet.client.transport import Transport
from tunefleet.client.types import (
    Artifacts,
    Cancelled,
    Downloaded,
    Job,
    JobPage,
    LogLine,
    MetricPoint,
    Submitted,
    Target,
    Worker,
)


class Client:
    """A connection to a tunefleet orchestrator.

    ``url``: the orchestrator's base URL, or several (a list, or comma-separated) for an
    active orchestrator and its standbys; ``token``: an API token (``tf_...``). Each
    left out comes from ``TUNEFLEET_URL`` / ``TUNEFLEET_TOKEN`` /
    ``TUNEFLEET_CA_CERT`` / ``TUNEFLEET_SSL_NO_VERIFY``, as for the command line.
    ``ca_cert`` trusts a CA (the orchestrator's self-signed ``cert.pem``);
    ``verify=False`` trusts any certificate (development only). ``timeout_s`` bounds
    each request (downloads and followed logs excepted).

    Use it as a context manager, or call ``close()``::

        with Client("https://orch:8001", token="tf_...") as tf:
            job = tf.wait(tf.submit("tiny-example")["job_id"], timeout_s=3600, check=True)
    """

    def __init__(
        self,
        url: str | Sequence[str] | None = None,
        token: str | None = None,
        *,
        ca_cert: str | os.PathLike[str] | None = None,
        verify: bool | None = None,
        timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        conn = Connection.resolve(
            url, token, Path(ca_cert) if ca_cert is not None else None, verify
        )
        self._transport = Transport(
            conn,
            PYTHON_SPELLING,
            request_timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
        )
        self._loop = LoopThread()
        # A client never closed still ends its thread when collected.
        self._finalizer = weakref.finalize(self, _close, self._loop, self._transport)

    # --- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the connections and the client's thread; the client cannot be used after."""
        self._finalizer()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:  # what a notebook shows; never the token
        token = "set" if self._transport.conn.token else "none"
        return f"Client(url={self.url!r}, urls={len(self.urls)}, token={token})"

    @property
    def url(self) -> str:
        """The orchestrator the client talks to now (after a failover, the active one)."""
        return self._transport.conn.base_url

    @property
    def urls(self) -> tuple[str, ...]:
        """Every orchestrator the client may fail over to, in the order given."""
        return self._transport.urls

    # --- jobs ---------------------------------------------------------------------------

    def submit(
        self,
        config: str | os.PathLike[str] | Mapping[str, Any],
        *,
        name: str | None = None,
        target: Target | None = None,
        worker_labels: Mapping[str, str] | None = None,
        gpu_count: int | None = None,
        min_vram_gb: float | None = None,
        gpu_name: str | None = None,
        priority: int | None = None,
        max_retries: int | None = None,
        timeout_minutes: float | None = None,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        team: str | None = None,
        dataloader: Any = None,
    ) -> Submitted:
        """Queue a job (``POST /api/queue/submit``). ``config`` is the name of a
        configuration on the orchestrator (a ``str``), a local ``.json``/``.toml``/
        ``.yaml`` file or SimpleTuner folder (a ``Path``, sent inline), or the
        configuration itself (a mapping)."""
        source: dict[str, Any]
        if isinstance(config, Mapping):
            source = {"config": dict(config)}
        elif isinstance(config, str):
            source = {"config_name": config}
        else:
            source = resolve(Path(config)).body()
        body = ops.submit_body(
            source,
            name=name,
            target=target,
            worker_labels=dict(worker_labels) if worker_labels is not None else None,
            gpu_count=gpu_count,
            min_vram_gb=min_vram_gb,
            gpu_name=gpu_name,
            priority=priority,
            max_retries=max_retries,
            timeout_minutes=timeout_minutes,
            command=list(command) if command is not None else None,
            env=dict(env) if env is not None else None,
            team=team,
            dataloader=dataloader,
        )
        return cast(Submitted, self.request("POST", "/api/queue/submit", body=body))

    def get(self, job_id: str) -> Job:
        """One job with its attempts and timeline (``GET /api/queue/{job_id}``)."""
        return cast(Job, self.request("GET", ops.job_path(job_id)))

    def jobs(
        self,
        *,
        status: str | Sequence[str] | None = None,
        user: str | None = None,
        team: str | None = None,
        worker_id: str | None = None,
        target: Target | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> JobPage:
        """A page of the jobs the token may see, newest first (``GET /api/queue``)."""
        statuses = [status] if isinstance(status, str) else status
        params = {
            "status": ",".join(statuses) if statuses else None,
            "user": user,
            "team": team,
            "worker_id": worker_id,
            "target": target,
            "limit": limit,
            "offset": offset,
        }
        return cast(JobPage, self.request("GET", "/api/queue", params=params))

    def wait(
        self,
        job_id: str,
        *,
        timeout_s: float | None = None,
        check: bool = False,
        on_poll: Callable[[Job], None] | None = None,
        poll_initial_s: float = INITIAL_S,
        poll_max_s: float = MAX_S,
    ) -> Job:
        """Wait until the job ends (completed, failed or cancelled); returns its detail.

        Polls with backoff (``poll_initial_s`` growing to ``poll_max_s``), riding out an
        unreachable orchestrator (a restart, a failover). ``on_poll`` sees each answer.
        Raises ``WaitTimeout`` (a ``TimeoutError``) after ``timeout_s`` (None: no
        limit); the job goes on. ``check=True`` raises ``JobFailed`` unless it completed.
        """
        job: Job | None = None
        answers = ops.polls(
            self._transport,
            job_id,
            timeout_s=timeout_s,
            initial_s=poll_initial_s,
            max_s=poll_max_s,
            factor=FACTOR,
        )
        for job in self._loop.iterate(answers):
            if on_poll is not None:
                on_poll(job)  # here, in the caller's thread: it may call the client
        assert job is not None  # polls ends only after a terminal answer, or raises
        if check and job["status"] != "completed":
            raise JobFailed(job)
        return job

    def cancel(self, job_id: str, reason: str | None = None) -> Cancelled:
        """Cancel a job: a pending one leaves the queue, a running one is stopped.
        Conflict if it has already ended."""
        body = {"reason": reason} if reason else {}
        return cast(Cancelled, self.request("POST", ops.job_path(job_id, "/cancel"), body=body))

    @overload
    def logs(
        self,
        job_id: str,
        *,
        follow: Literal[False] = False,
        attempt: int | None = None,
        stream: Literal["stdout", "stderr"] | None = None,
    ) -> list[LogLine]: ...

    @overload
    def logs(
        self,
        job_id: str,
        *,
        follow: Literal[True],
        attempt: int | None = None,
        stream: Literal["stdout", "stderr"] | None = None,
    ) -> Iterator[LogLine]: ...

    def logs(
        self,
        job_id: str,
        *,
        follow: bool = False,
        attempt: int | None = None,
        stream: Literal["stdout", "stderr"] | None = None,
    ) -> list[LogLine] | Iterator[LogLine]:
        """The job's output lines. ``follow=True`` returns an iterator: every line so
        far, then each new one as it comes, ending when the job ends (reconnecting from
        the last line seen if the stream breaks); ``attempt`` and ``stream`` filter."""
        if not follow:
            return self._loop.run(ops.read_logs(self._transport, job_id, attempt, stream))
        lines = self._loop.iterate(ops.follow_logs(self._transport, job_id))
        return (
            line
            for line in lines
            if (attempt is None or line.get("attempt") == attempt)
            and (stream is None or line.get("stream") == stream)
        )

    def metrics(self, job_id: str, *, attempt: int | None = None) -> list[MetricPoint]:
        """The job's metric history: one point per reported step and attempt."""
        return self._loop.run(ops.read_metrics(self._transport, job_id, attempt))

    def artifacts(self, job_id: str) -> Artifacts:
        """The job's stored outputs and complete checkpoints (newest first)."""
        return self._loop.run(ops.list_artifacts(self._transport, job_id))

    def download(
        self,
        job_id: str,
        keys: str | Sequence[str] | None = None,
        to: str | os.PathLike[str] = ".",
        *,
        resume: bool = True,
        on_bytes: Callable[[int], None] | None = None,
    ) -> list[Downloaded]:
        """Download the job's artifacts named by ``keys`` (all when None) into ``to``,
        keeping their folders; each is streamed to disk and its SHA-256 checked
        (``ChecksumMismatch``). With ``resume``, a download broken midway continues
        from its ``.part`` file with a Range request."""
        wanted = [keys] if isinstance(keys, str) else keys

        async def fetch() -> list[Downloaded]:
            listing = await ops.list_artifacts(self._transport, job_id)
            done = []
            for item in ops.select_artifacts(job_id, listing, wanted):
                done.append(
                    await ops.download_artifact(
                        self._transport, job_id, item, Path(to), on_bytes, resume=resume
                    )
                )
            return done

        return self._loop.run(fetch())

    # --- workers ------------------------------------------------------------------------

    def workers(self, *, status: str | None = None) -> list[Worker]:
        """The fleet's workers (``GET /api/admin/workers``; needs ``admin.workers``)."""
        data = self.request("GET", "/api/admin/workers", params={"status": status})
        return cast(list[Worker], data["workers"])

    def whoami(self) -> dict[str, Any]:
        """Who the token belongs to, and its permissions (``GET /api/auth/whoami``)."""
        return cast(dict[str, Any], self.request("GET", "/api/auth/whoami"))

    # --- anything else ------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """Any API endpoint (docs/api.md): the decoded JSON answer, with the same
        failover and errors as the methods above."""
        if method.upper() == "POST" and body is None:
            body = {}
        return self._loop.run(
            self._transport.request(method.upper(), path, body=body, params=params)
        )


def _close(loop: LoopThread, transport: Transport) -> None:
    loop.close(transport.close())
