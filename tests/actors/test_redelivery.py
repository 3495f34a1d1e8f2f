"""redeliver_dispatch: a job_submit is pushed again exactly when the agent's heartbeat
shows it does not hold the job it was sent, and nothing else acknowledged it yet."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tunefleet.actors.redelivery import redeliver_dispatch, submit_to_redeliver
from tunefleet.actors.stream import Outbox

jobs = st.one_of(st.none(), st.sampled_from(["j_1", "j_2"]))


def test_examples() -> None:
    # Dropped: the agent says it holds nothing, or still the job before.
    assert redeliver_dispatch("j_2", True, True, None)
    assert redeliver_dispatch("j_2", True, True, "j_1")
    # It holds the job: acknowledged or not, nothing to send.
    assert not redeliver_dispatch("j_2", True, True, "j_2")
    # Acknowledged already, no stream to carry it, or no job here.
    assert not redeliver_dispatch("j_2", False, True, None)
    assert not redeliver_dispatch("j_2", True, False, None)
    assert not redeliver_dispatch(None, True, True, None)
    # A cancel was pushed after it: sending the job again would undo it.
    assert not redeliver_dispatch("j_2", True, True, None, stop_requested=True)


@given(jobs, st.booleans(), st.booleans(), jobs, st.booleans())
def test_never_for_an_acknowledged_held_or_stopped_job(
    held: str | None, unacked: bool, stream_open: bool, reported: str | None, stopping: bool
) -> None:
    again = redeliver_dispatch(held, unacked, stream_open, reported, stopping)
    assert again == (
        held is not None and unacked and stream_open and reported != held and not stopping
    )


def test_the_kept_event_itself_is_sent_again_until_acknowledged_or_cancelled() -> None:
    outbox = Outbox()
    submit = outbox.add("job_submit", {"job_id": "j_1", "attempt": 1}, "j_1")
    assert submit_to_redeliver(outbox, "j_1", True, None) is submit  # same id, same attempt
    assert submit_to_redeliver(outbox, "j_1", True, "j_1") is None
    assert submit_to_redeliver(outbox, None, True, None) is None
    outbox.add("job_cancel", {"job_id": "j_1"}, "j_1")
    assert submit_to_redeliver(outbox, "j_1", True, None) is None
    outbox.acknowledge_job("j_1", "job_cancel")
    outbox.acknowledge_job("j_1", "job_submit")  # the first report came
    assert submit_to_redeliver(outbox, "j_1", True, None) is None
