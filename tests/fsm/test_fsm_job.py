"""The job lifecycle: every row of JOB_TRANSITIONS, every illegal event, the retry
policy, the bound on undelivered dispatches, preempted attempts that spend no retry,
the table checked against the contract's own wording, and random sequences."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tunefleet.fsm import (
    DEFAULT_MAX_RETRIES,
    JOB_LIFECYCLE,
    JOB_TRANSITIONS,
    MAX_UNDELIVERED,
    TERMINAL_JOB_STATES,
    IllegalTransition,
    JobFsmMixin,
    JobState,
)

STATES = [state.value for state in JobState]
EVENTS = sorted({row["trigger"] for row in JOB_TRANSITIONS})
# (attempts, max_retries, undelivered): fresh, on the last allowed attempt, past it, no
# retries; with undelivered dispatches (spent no retry), and on the bound's last one.
WORLDS = [
    (0, 3, 0),
    (2, 3, 0),
    (3, 3, 0),
    (4, 3, 0),
    (0, 0, 0),
    (1, 0, 0),
    (2, 0, 1),
    (5, 3, 1),
    (MAX_UNDELIVERED, 0, MAX_UNDELIVERED - 1),
    (MAX_UNDELIVERED, 3, MAX_UNDELIVERED),
]


class Job(JobFsmMixin):
    def __init__(
        self,
        state: str = "pending",
        attempts: int = 0,
        max_retries: int = DEFAULT_MAX_RETRIES,
        job_id: str = "j_1",
        undelivered: int = 0,
        preempted: int = 0,
    ) -> None:
        self.job_id = job_id
        self.state = state
        self.attempts = attempts
        self.max_retries = max_retries
        self.undelivered = undelivered
        self.preempted = preempted

    def facts(self) -> tuple[str, int, int, int]:
        return (self.state, self.attempts, self.max_retries, self.undelivered)


def contract(
    state: str,
    event: str,
    attempts: int,
    max_retries: int,
    undelivered: int = 0,
    preempted: int = 0,
) -> tuple[str, int] | None:
    """The contract's prose, written independently of the table: (new state, attempts)
    or None when the event is illegal. ``undelivered`` counts the dispatches never
    acknowledged (for a lose, the one being lost included): they spend no retry, and
    the bound-th of them fails the job. ``preempted`` counts attempts that ended
    preempted: they spend no retry either, and have no bound."""
    live = state in ("pending", "dispatched", "running")
    if event == "approve":
        return ("pending", attempts) if state == "pending_approval" else None
    if event == "reject":
        return ("cancelled", attempts) if state == "pending_approval" else None
    if event == "cancel":
        return ("cancelled", attempts) if live or state == "pending_approval" else None
    spent = attempts - undelivered - preempted
    if event == "preempt":
        # Whatever its retries: the attempt is counted apart, never against max_retries.
        return ("pending", attempts) if state in ("dispatched", "running") else None
    if event == "dispatch":
        ok = state == "pending" and spent < max_retries + 1
        return ("dispatched", attempts + 1) if ok else None
    if event == "start":
        return ("running", attempts) if state == "dispatched" else None
    if event == "complete":
        return ("completed", attempts) if state == "running" else None
    if event in ("fail", "cancel"):
        return ({"fail": "failed", "cancel": "cancelled"}[event], attempts) if live else None
    if event == "lose":
        if state not in ("dispatched", "running"):
            return None
        requeued = spent <= max_retries and undelivered < MAX_UNDELIVERED
        return ("pending" if requeued else "failed", attempts)
    raise AssertionError(f"the contract has no job event {event}")


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _row_applies(row: dict[str, Any], job: Job) -> bool:
    return all(getattr(job, name)() for name in _names(row.get("conditions"))) and not any(
        getattr(job, name)() for name in _names(row.get("unless"))
    )


ROW_SOURCES = [
    pytest.param(index, source, id=f"{row['trigger']}:{source}->{row['dest']}#{index}")
    for index, row in enumerate(JOB_TRANSITIONS)
    for source in _names(row["source"])
]
ALLOWED = {(source, row["trigger"]) for row in JOB_TRANSITIONS for source in _names(row["source"])}
ILLEGAL = sorted(set(itertools.product(STATES, EVENTS)) - ALLOWED)


@pytest.mark.parametrize(("index", "source"), ROW_SOURCES)
def test_each_row_moves_to_its_destination_whenever_its_guards_pass(
    index: int, source: str
) -> None:
    row = JOB_TRANSITIONS[index]
    fired = 0
    for attempts, max_retries, undelivered in WORLDS:
        job = Job(source, attempts, max_retries, undelivered=undelivered)
        if not _row_applies(row, job):
            continue
        assert JOB_LIFECYCLE.can_fire(job, row["trigger"])
        assert JOB_LIFECYCLE.fire(job, row["trigger"]) == row["dest"]
        assert job.state == row["dest"]
        fired += 1
    assert fired, "a row whose guards can never pass is dead"


@pytest.mark.parametrize(("state", "event"), ILLEGAL)
def test_every_event_outside_the_table_is_illegal(state: str, event: str) -> None:
    for attempts, max_retries, undelivered in WORLDS:
        job = Job(state, attempts, max_retries, job_id="j_12", undelivered=undelivered)
        assert not JOB_LIFECYCLE.can_fire(job, event)
        with pytest.raises(IllegalTransition) as caught:
            JOB_LIFECYCLE.fire(job, event)
        error = caught.value
        assert (error.entity, error.entity_id, error.state, error.event) == (
            "job",
            "j_12",
            state,
            event,
        )
        assert str(error) == f"job j_12 is {state}; cannot {event} it"
        assert job.facts() == (state, attempts, max_retries, undelivered), (
            "a refused event changes nothing"
        )


@pytest.mark.parametrize(("state", "event"), sorted(ALLOWED))
def test_at_most_one_row_applies_so_row_order_does_not_matter(state: str, event: str) -> None:
    for attempts, max_retries, undelivered in WORLDS:
        job = Job(state, attempts, max_retries, undelivered=undelivered)
        rows = [
            row
            for row in JOB_TRANSITIONS
            if row["trigger"] == event and state in _names(row["source"]) and _row_applies(row, job)
        ]
        assert len(rows) <= 1, rows


@pytest.mark.parametrize(("state", "event"), list(itertools.product(STATES, EVENTS)))
def test_the_table_does_what_the_contract_says(state: str, event: str) -> None:
    for attempts, max_retries, undelivered in WORLDS:
        job = Job(state, attempts, max_retries, undelivered=undelivered)
        expected = contract(state, event, attempts, max_retries, undelivered)
        if expected is None:
            with pytest.raises(IllegalTransition):
                JOB_LIFECYCLE.fire(job, event)
            assert job.facts() == (state, attempts, max_retries, undelivered)
        else:
            assert JOB_LIFECYCLE.fire(job, event) == expected[0]
            assert (job.state, job.attempts) == expected


def test_every_guard_and_effect_the_table_names_is_on_the_mixin() -> None:
    for row in JOB_TRANSITIONS:
        for key in ("conditions", "unless", "before", "after"):
            for name in _names(row.get(key)):
                assert callable(getattr(JobFsmMixin, name, None)), (key, name)


def test_terminal_states_are_the_ones_without_events() -> None:
    assert {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED} == TERMINAL_JOB_STATES
    for state in STATES:
        assert (JOB_LIFECYCLE.events_from(state) == frozenset()) == (state in TERMINAL_JOB_STATES)
    assert JOB_LIFECYCLE.events_from("pending") == {"dispatch", "fail", "cancel"}


@pytest.mark.parametrize("max_retries", [0, 1, DEFAULT_MAX_RETRIES])
def test_a_job_runs_at_most_max_retries_plus_one_times(max_retries: int) -> None:
    job = Job(max_retries=max_retries)
    for attempt in range(1, max_retries + 2):
        assert JOB_LIFECYCLE.fire(job, "dispatch") == "dispatched"
        assert job.attempts == attempt
        assert JOB_LIFECYCLE.fire(job, "start") == "running"
        expected = "pending" if attempt <= max_retries else "failed"
        assert JOB_LIFECYCLE.fire(job, "lose") == expected
    assert job.state == "failed"
    assert job.attempts == max_retries + 1


def test_a_lost_dispatch_that_was_never_acknowledged_also_counts() -> None:
    job = Job(max_retries=1)
    JOB_LIFECYCLE.fire(job, "dispatch")
    assert JOB_LIFECYCLE.fire(job, "lose") == "pending"
    JOB_LIFECYCLE.fire(job, "dispatch")
    assert JOB_LIFECYCLE.fire(job, "lose") == "failed"


def test_undelivered_dispatches_spend_no_retry_up_to_the_bound() -> None:
    job = Job(max_retries=0)
    for dispatch in range(1, MAX_UNDELIVERED):
        JOB_LIFECYCLE.fire(job, "dispatch")
        job.undelivered += 1  # never acknowledged: counted before the lose, as the actor does
        assert JOB_LIFECYCLE.fire(job, "lose") == "pending"
        assert (job.attempts, job.undelivered) == (dispatch, dispatch)
    # The bound-th undelivered dispatch fails the job, retries or not.
    JOB_LIFECYCLE.fire(job, "dispatch")
    job.undelivered += 1
    assert not job.may_requeue() and job.retries_left()
    assert JOB_LIFECYCLE.fire(job, "lose") == "failed"
    assert job.facts() == ("failed", MAX_UNDELIVERED, 0, MAX_UNDELIVERED)


def test_an_acknowledged_attempt_lost_after_undelivered_ones_spends_the_retry() -> None:
    job = Job(max_retries=0)
    JOB_LIFECYCLE.fire(job, "dispatch")
    job.undelivered += 1
    assert JOB_LIFECYCLE.fire(job, "lose") == "pending"
    JOB_LIFECYCLE.fire(job, "dispatch")
    JOB_LIFECYCLE.fire(job, "start")
    assert JOB_LIFECYCLE.fire(job, "lose") == "failed"  # its only attempt that ran


def test_dispatch_past_the_limit_is_refused_and_counts_nothing() -> None:
    job = Job(attempts=4, max_retries=3)  # e.g. max_retries lowered after a restart
    assert job.retries_left() is False
    assert not JOB_LIFECYCLE.can_fire(job, "dispatch")
    with pytest.raises(IllegalTransition, match=r"^job j_1 is pending; cannot dispatch it$"):
        JOB_LIFECYCLE.fire(job, "dispatch")
    assert job.facts() == ("pending", 4, 3, 0)


@pytest.mark.parametrize("max_retries", [0, 2])
def test_preempted_attempts_spend_no_retry(max_retries: int) -> None:
    job = Job(max_retries=max_retries)
    for _ in range(MAX_UNDELIVERED + 3):  # more than any retry or delivery bound
        JOB_LIFECYCLE.fire(job, "dispatch")
        JOB_LIFECYCLE.fire(job, "start")
        assert JOB_LIFECYCLE.fire(job, "preempt") == "pending"
    assert job.preempted == job.attempts == MAX_UNDELIVERED + 3
    # Every retry is still there: the job runs max_retries + 1 more times before failing.
    for attempt in range(max_retries + 1):
        JOB_LIFECYCLE.fire(job, "dispatch")
        expected = "pending" if attempt < max_retries else "failed"
        assert JOB_LIFECYCLE.fire(job, "lose") == expected


def test_a_preempted_dispatch_not_yet_acknowledged_goes_back_too() -> None:
    job = Job(max_retries=0)
    JOB_LIFECYCLE.fire(job, "dispatch")
    assert JOB_LIFECYCLE.fire(job, "preempt") == "pending"
    assert job.retries_left() and JOB_LIFECYCLE.can_fire(job, "dispatch")


def test_only_a_dispatched_or_running_job_can_be_preempted() -> None:
    for state in STATES:
        assert JOB_LIFECYCLE.can_fire(Job(state), "preempt") == (state in ("dispatched", "running"))


def test_only_approval_releases_a_held_job_to_the_queue() -> None:
    job = Job("pending_approval")
    assert not JOB_LIFECYCLE.can_fire(job, "dispatch")
    assert JOB_LIFECYCLE.fire(job, "approve") == "pending"
    assert JOB_LIFECYCLE.can_fire(job, "dispatch")


def test_a_rejected_job_ends_cancelled() -> None:
    job = Job("pending_approval")
    assert JOB_LIFECYCLE.fire(job, "reject") == "cancelled"
    assert job.state in TERMINAL_JOB_STATES


def test_cancelling_a_completed_job_names_the_job_and_its_state() -> None:
    job = Job("completed", job_id="j_12")
    with pytest.raises(IllegalTransition, match=r"^job j_12 is completed; cannot cancel it$"):
        JOB_LIFECYCLE.fire(job, "cancel")


class JobLifecycle(RuleBasedStateMachine):
    """One job under random events, legal or not, against the contract."""

    @initialize(max_retries=st.integers(min_value=0, max_value=3), held=st.booleans())
    def submit(self, max_retries: int, held: bool) -> None:
        # held: an approval rule matched at submit, so the job starts awaiting approval.
        self.job = Job("pending_approval" if held else "pending", max_retries=max_retries)
        self.terminal_at: str | None = None
        self.dispatches = 0
        self.preemptions = 0

    # Ending events are rarer so that sequences live long enough to exhaust their retries
    # and the bound on undelivered dispatches.
    @rule(event=st.sampled_from([*EVENTS, *["dispatch", "start", "lose"] * 3]))
    def fire(self, event: str) -> None:
        self._fire(event)

    @rule(acknowledged=st.booleans())
    def preempt(self, acknowledged: bool) -> None:
        """What the preemption flow does: a dispatched or running attempt is stopped and
        the job goes back to the queue, the attempt counted in ``preempted``."""
        if self.job.state == "pending":
            self._fire("dispatch")
        if acknowledged and self.job.state == "dispatched":
            self._fire("start")
        if self.job.state in ("dispatched", "running"):
            spent = self.job.attempts - self.job.undelivered - self.job.preempted
            self._fire("preempt")
            assert self.job.state == "pending", "a preemption always requeues"
            assert self.job.attempts - self.job.undelivered - self.job.preempted == spent - 1, (
                "a preempted attempt never counts as a retry"
            )

    @rule(times=st.integers(min_value=1, max_value=3))
    def dispatch_undelivered(self, times: int) -> None:
        """What the job actor does when a dispatch is never acknowledged (stream closed,
        or acknowledgement timeout): count it, then lose it."""
        for _ in range(times):
            if self.job.state == "pending":
                self._fire("dispatch")
            if self.job.state != "dispatched":
                return
            self.job.undelivered += 1
            self._fire("lose")

    def _fire(self, event: str) -> None:
        before = self.job.facts()
        state, attempts, max_retries, undelivered = before
        expected = contract(state, event, attempts, max_retries, undelivered, self.job.preempted)
        assert JOB_LIFECYCLE.can_fire(self.job, event) == (expected is not None)
        if expected is None:
            with pytest.raises(IllegalTransition):
                JOB_LIFECYCLE.fire(self.job, event)
            assert self.job.facts() == before
            return
        assert JOB_LIFECYCLE.fire(self.job, event) == expected[0]
        assert (self.job.state, self.job.attempts) == expected
        self.dispatches += event == "dispatch"
        self.preemptions += event == "preempt"
        if event == "dispatch":
            assert before[0] != "pending_approval", "a job awaiting approval is never dispatched"
        if self.job.state in TERMINAL_JOB_STATES:
            self.terminal_at = self.job.state

    @invariant()
    def terminal_states_absorb(self) -> None:
        if self.terminal_at is not None:
            assert self.job.state == self.terminal_at
            assert JOB_LIFECYCLE.events_from(self.job.state) == frozenset()

    @invariant()
    def attempts_stay_within_the_retry_policy(self) -> None:
        assert self.job.attempts == self.dispatches
        if self.job.state == "pending_approval":
            assert self.job.attempts == 0, "nothing runs before approval"
        assert self.job.preempted == self.preemptions
        spent = self.job.attempts - self.job.undelivered - self.job.preempted
        assert 0 <= spent <= self.job.max_retries + 1
        assert 0 <= self.job.undelivered <= MAX_UNDELIVERED
        if self.job.undelivered == MAX_UNDELIVERED:
            assert self.job.state == "failed", "the bound-th undelivered dispatch fails it"

    @invariant()
    def ends_in_one_terminal_state_or_is_still_live(self) -> None:
        live = {"pending_approval", "pending", "dispatched", "running"}
        assert (self.job.state in live) != (self.job.state in TERMINAL_JOB_STATES)


TestJobLifecycle = JobLifecycle.TestCase
TestJobLifecycle.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
