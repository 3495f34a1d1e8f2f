"""`tunefleet workers ...`: the seed's admin operations on the fleet (``admin.workers``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click
from rich.text import Text

from tunefleet.actors.delete_advice import CLI_FORCE, refused_delete_advice
from tunefleet.cli.options import call, connection_options, json_option, parse_pairs
from tunefleet.cli.output import (
    NONE,
    no_match,
    pairs_text,
    plain,
    print_fields,
    print_json,
    print_line,
    print_table,
    progress_text,
    relative_time,
    status_text,
)
from tunefleet.client.connection import Connection
from tunefleet.client.errors import ApiError
from tunefleet.client.transport import Transport
from tunefleet.fsm.worker import WorkerState

WORKER_STATUSES = tuple(state.value for state in WorkerState)


@click.group("workers")
def workers() -> None:
    """Manage workers: list, create, drain, resume, rotate tokens, delete."""


def _path(worker_id: str, action: str = "") -> str:
    return f"/api/admin/workers/{quote(worker_id, safe='')}{action}"


def gpus_text(worker: dict[str, Any]) -> str:
    """'2x NVIDIA A100 (80 GB)', or the accelerator ('cpu') when there is no GPU."""
    count = worker.get("gpu_count") or 0
    if not count:
        return worker.get("accelerator_type") or NONE
    text = f"{count}x {worker.get('gpu_name') or 'GPU'}"
    if worker.get("gpu_vram_gb"):
        text += f" ({plain(worker['gpu_vram_gb'])} GB)"
    return text


def _last_seen(worker: dict[str, Any]) -> str:
    return relative_time(worker.get("last_seen") or worker.get("last_heartbeat"))


@workers.command("list")
@click.option("--status", type=click.Choice(WORKER_STATUSES), help="Only workers in this state.")
@json_option
@connection_options
def list_workers(conn: Connection, status: str | None, as_json: bool) -> None:
    """List workers (GET /api/admin/workers)."""
    data = call(conn, lambda api: api.get("/api/admin/workers", {"status": status}))
    if as_json:
        print_json(data)
        return
    rows = [
        [
            w["id"],
            w["name"],
            status_text(w["status"]),
            # An open stream: a worker without one takes no job, whatever its status.
            "yes" if w.get("connected") else "no",
            w.get("worker_type") or NONE,
            gpus_text(w),
            pairs_text(w.get("labels")),
            w.get("current_job_id") or NONE,
            _last_seen(w),
        ]
        for w in data["workers"]
    ]
    columns = ["ID", "NAME", "STATUS", "CONNECTED", "TYPE", "GPUS", "LABELS", "JOB", "LAST SEEN"]
    empty = no_match(
        "worker", {"--status": status}, "No workers. Create one with: tunefleet workers create NAME"
    )
    print_table(columns, rows, empty, wrap=("LABELS", "GPUS"))


@workers.command("show")
@click.argument("worker_id")
@json_option
@connection_options
def show_worker(conn: Connection, worker_id: str, as_json: bool) -> None:
    """Show one worker (GET /api/admin/workers/ID)."""
    w = call(conn, lambda api: api.get(_path(worker_id)))
    if as_json:
        print_json(w)
        return
    state = status_text(w["status"])
    if w.get("drain_requested") and w["status"] != WorkerState.DRAINING:
        state.append(" (drain requested)", style="yellow")
    job = w.get("current_job_id")
    print_fields(
        [
            ("ID", w["id"]),
            ("Name", w["name"]),
            ("Status", state),
            ("Connected", "yes" if w.get("connected") else "no"),
            ("Type", w.get("worker_type") or NONE),
            ("GPUs", gpus_text(w)),
            ("Labels", pairs_text(w.get("labels"))),
            ("Agent labels", pairs_text(w.get("agent_labels"))),
            ("Job", f"{job} {progress_text(w.get('job_progress'))}" if job else NONE),
            ("Host", f"{plain(w.get('hostname'))} ({plain(w.get('client_address'))})"),
            ("Last heartbeat", relative_time(w.get("last_heartbeat"))),
            ("Connected since", relative_time(w.get("connected_at"))),
            ("Created", relative_time(w.get("created_at"))),
            # Where the agent's --name / --persistent disagree with the administrator's.
            *(
                ("Warning", Text(str(warning), style="yellow"))
                for warning in w.get("warnings") or []
            ),
        ]
    )


def _print_token(data: dict[str, Any], headline: str) -> None:
    click.echo(headline)
    click.echo("The token is shown only now; the orchestrator keeps just its hash:")
    print_line(f"  {data['token']}")
    click.echo("Start the worker on the GPU machine with:")
    print_line(f"  {data['connection_command']}")


@workers.command("create")
@click.argument("name")
@click.option(
    "--ephemeral",
    is_flag=True,
    help="An ephemeral worker (exits after one job); default persistent.",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="A label jobs can select on; repeatable. Wins over the agent's own.",
)
@click.option(
    "--allow-duplicate",
    is_flag=True,
    help="Create it even if a worker of this name exists (names are unique otherwise).",
)
@json_option
@connection_options
def create_worker(
    conn: Connection,
    name: str,
    ephemeral: bool,
    labels: tuple[str, ...],
    allow_duplicate: bool,
    as_json: bool,
) -> None:
    """Create a worker and print its token once (POST /api/admin/workers)."""
    body = {
        "name": name,
        "worker_type": "ephemeral" if ephemeral else "persistent",
        "labels": parse_pairs(labels, "--label"),
    }
    path = "/api/admin/workers" + ("?allow_duplicate=true" if allow_duplicate else "")
    data = call(conn, lambda api: api.post(path, body))
    if as_json:
        print_json(data)
        return
    kind, name, worker_id = data["worker_type"], data["name"], data["worker_id"]
    _print_token(data, f"Created {kind} worker {name} ({worker_id}).")


@workers.command("drain")
@click.argument("worker_id")
@json_option
@connection_options
def drain_worker(conn: Connection, worker_id: str, as_json: bool) -> None:
    """Finish the current job, take no more (POST .../drain)."""
    data = call(conn, lambda api: api.post(_path(worker_id, "/drain")))
    if as_json:
        print_json(data)
        return
    click.echo(
        f"Draining {worker_id} (now {data['status']}): it finishes its current job and takes "
        f"no more. Undo with: tunefleet workers resume {worker_id}"
    )


@workers.command("resume")
@click.argument("worker_id")
@json_option
@connection_options
def resume_worker(conn: Connection, worker_id: str, as_json: bool) -> None:
    """Undo a drain (POST .../resume)."""
    data = call(conn, lambda api: api.post(_path(worker_id, "/resume")))
    if as_json:
        print_json(data)
        return
    click.echo(f"Resumed {worker_id}: now {data['status']}, taking jobs again.")


@workers.command("rotate-token")
@click.argument("worker_id")
@json_option
@connection_options
def rotate_token(conn: Connection, worker_id: str, as_json: bool) -> None:
    """Give a worker a new token; the old one stops working at once (POST .../token)."""
    data = call(conn, lambda api: api.post(_path(worker_id, "/token")))
    if as_json:
        print_json(data)
        return
    _print_token(data, f"New token for {worker_id}; the old one no longer works.")


async def _refusal_with_cli_advice(api: Transport, worker_id: str, refused: ApiError) -> ApiError:
    """The orchestrator's 409 advises ``?force=true``; say the same with ``--force``."""
    if refused.status != 409:
        return refused
    worker = await api.get(_path(worker_id))
    if worker.get("is_local") or worker["status"] in (WorkerState.OFFLINE, WorkerState.CONNECTING):
        return refused  # refused for another reason: its own detail says why
    advice = refused_delete_advice(
        worker_id,
        worker["status"],
        worker.get("worker_type") or "",
        worker.get("current_job_id"),
        CLI_FORCE,
    )
    return type(refused)(refused.status, advice)


@workers.command("delete")
@click.argument("worker_id")
@click.option(
    "--force", is_flag=True, help="Delete even if not offline; its job goes back to the queue."
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@json_option
@connection_options
def delete_worker(conn: Connection, worker_id: str, force: bool, yes: bool, as_json: bool) -> None:
    """Delete a worker; only an offline one unless --force (DELETE /api/admin/workers/ID)."""
    if not yes:
        worker = call(conn, lambda api: api.get(_path(worker_id)))
        what = f"worker {worker_id} ({worker['name']}, {worker['status']})"
        if force and worker.get("current_job_id"):
            what += f" and requeue its job {worker['current_job_id']}"
        click.confirm(f"Delete {what}?", abort=True)

    async def delete(api: Transport) -> Any:
        try:
            return await api.delete(_path(worker_id), {"force": "true" if force else None})
        except ApiError as refused:
            raise await _refusal_with_cli_advice(api, worker_id, refused) from None

    data = call(conn, delete)
    if as_json:
        print_json(data)
        return
    message = f"Deleted worker {worker_id}."
    if data.get("requeued_job_id"):
        message += f" Its job {data['requeued_job_id']} went back to the queue."
    click.echo(message)
