"""What to tell an administrator whose delete of a worker was refused (it is not offline).

Waiting for "offline" only works where the worker's agent leaves by itself: a drained
ephemeral worker's agent exits and disconnects, but a drained persistent one stays
connected and draining for as long as its agent runs (the drain is sticky). So the
advice depends on the worker's type and whether it runs a job, and for a persistent
worker it is the forced delete. The API and the command line give the same advice,
each naming its own way to force (``?force=true``, ``tunefleet workers delete ID --force``).
"""

from __future__ import annotations

from tunefleet.fsm.worker import WorkerState

API_FORCE = "?force=true"
CLI_FORCE = "tunefleet workers delete {worker_id} --force"


def refused_delete_advice(
    worker_id: str, status: str, worker_type: str, job_id: str | None, force: str
) -> str:
    """The 409 message for deleting a worker in ``status`` (not offline or connecting).

    ``force`` is how to force the delete, ``{worker_id}`` filled in. The message stays
    under the API's 300-character detail limit with the longest ids.
    """
    forced = force.format(worker_id=worker_id)
    head = f"worker {worker_id} is {status}"
    ephemeral = worker_type == "ephemeral"
    if job_id is None:
        if ephemeral and status == WorkerState.DRAINING:
            return (
                f"{head}: its ephemeral agent was told to stop, so it goes offline when it "
                f"disconnects; delete it then, or now with {forced} (no job is lost)"
            )
        if ephemeral:
            return (
                f"{head} and runs no job: delete it with {forced} (no job is lost), or drain "
                "it: its ephemeral agent then exits and the worker goes offline"
            )
        return (
            f"{head} and runs no job; a persistent worker stays online even when drained, "
            f"so delete it with {forced} (its agent is told to stop; no job is lost)"
        )
    finish = (
        "the job finishes first"
        if status == WorkerState.DRAINING
        else "drain it to let the job finish"
    )
    now = f"or use {forced} now and the job goes back to the queue"
    if ephemeral:
        return (
            f"{head} with job {job_id}: {finish}, then its ephemeral agent exits and the "
            f"worker goes offline; delete it then, {now}"
        )
    return (
        f"{head} with job {job_id}: {finish}, then delete it with {forced} (a persistent "
        f"worker stays online when drained), {now}"
    )
