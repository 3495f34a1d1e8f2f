"""A simulated worker over plain HTTP, for benchmarks that need one job dispatched to a
worker they control (its job_submit carries the upload credentials): the admin API
call, and "register, open the stream, take the next job, say it runs"."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from bench.orchestrator_proc import ADMIN_TOKEN, Orchestrator


def api(orch: Orchestrator, method: str, path: str, body: Any = None, token: str = "") -> Any:
    """One JSON request: with a worker token (wt_...) as that worker, else as the admin."""
    headers = {"Content-Type": "application/json"}
    if token.startswith("wt_"):
        headers["X-Worker-Token"] = token
    else:
        headers["Authorization"] = f"Bearer {ADMIN_TOKEN}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{orch.port}{path}", data=data, method=method, headers=headers
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())


def first_worker_takes(orch: Orchestrator, name: str, config: dict[str, Any]) -> dict[str, Any]:
    """A new worker takes a new job and says it runs. Returns its job_submit with the
    upload endpoint made absolute (as agents do: it is a path), the worker's token and id."""
    created = api(orch, "POST", "/api/admin/workers", {"name": name})
    token, worker_id = created["token"], created["worker_id"]
    register = {"name": name, "gpu_count": 0, "persistent": True}
    api(orch, "POST", "/api/workers/register", register, token)
    stream = urllib.request.urlopen(
        urllib.request.Request(
            f"http://127.0.0.1:{orch.port}/api/workers/stream?worker_id={worker_id}",
            headers={"X-Worker-Token": token},
        ),
        timeout=30,
    )
    try:
        job = api(orch, "POST", "/api/queue/submit", {"config": config, "target": "worker"})
        for raw in stream:
            line = raw.decode().strip()
            if line.startswith("data: ") and '"job_submit"' in line:
                event: dict[str, Any] = json.loads(line[6:])
                if event["job_id"] == job["job_id"]:
                    status = {"status": "running", "attempt": event["attempt"]}
                    api(orch, "POST", f"/api/workers/job/{job['job_id']}/status", status, token)
                    endpoint = f"http://127.0.0.1:{orch.port}{event['upload_endpoint']}"
                    return {
                        **event,
                        "upload_endpoint": endpoint,
                        "worker_token": token,
                        "worker_id": worker_id,
                    }
    finally:
        stream.close()  # a closed stream takes no dispatch: a retry goes elsewhere
    raise RuntimeError(f"{name}: the stream ended before the job_submit: {orch.log_tail()}")
