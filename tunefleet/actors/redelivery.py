"""When a dispatch the agent has not acknowledged is pushed to it again, at once.

SimpleTuner's agent clears its job only after its completion report's answer is read
(shared/PROTOCOL.md), and its stream is another connection: the next job_submit can
arrive first, and that agent drops it without a word. Its next heartbeat then says it
holds no job (or still the old one) while the orchestrator waits for the new job's
acknowledgement: that heartbeat is the evidence, and the job_submit is pushed again
then, instead of the job waiting for the acknowledgement timeout and counting as
undelivered. Pure: the worker actor decides with it on every heartbeat.

A copy that reaches an agent which did take the job is harmless: both agents ignore a
job_submit for the job they run (SimpleTuner's ignores any while it holds one), and the
push stops at the first report, which acknowledges the dispatch.
"""

from __future__ import annotations

from tunefleet.actors.stream import Outbox, StreamEvent


def redeliver_dispatch(
    held_job_id: str | None,
    submit_unacknowledged: bool,
    stream_open: bool,
    reported_job_id: str | None,
    stop_requested: bool = False,
) -> bool:
    """Whether to push the job_submit of ``held_job_id`` again: it is not acknowledged,
    the stream is open to carry it, the agent's heartbeat names another job or none, and
    nobody asked to stop the job meanwhile (a cancel sent after it must not be undone)."""
    return (
        held_job_id is not None
        and submit_unacknowledged
        and stream_open
        and reported_job_id != held_job_id
        and not stop_requested
    )


def submit_to_redeliver(
    outbox: Outbox, held_job_id: str | None, stream_open: bool, reported_job_id: str | None
) -> StreamEvent | None:
    """The kept job_submit event to push again after a heartbeat, or None."""
    if held_job_id is None:
        return None
    submit = outbox.find_event(held_job_id, "job_submit")
    stopping = outbox.find(held_job_id, "job_cancel") is not None
    again = redeliver_dispatch(
        held_job_id, submit is not None, stream_open, reported_job_id, stopping
    )
    return submit if again else None
