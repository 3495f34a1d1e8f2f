"""The worker lifecycle: every row of WORKER_TRANSITIONS, every illegal event, the table
checked against the contract's own wording, and random event sequences."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tunefleet.fsm import (
    WORKER_LIFECYCLE,
    WORKER_TRANSITIONS,
    IllegalTransition,
    WorkerFsmMixin,
    WorkerState,
)

STATES = [state.value for state in WorkerState]
EVENTS = sorted({row["trigger"] for row in WORKER_TRANSITIONS})
# Every combination of the facts the guards read: (drain_requested, current_job_id,
# quarantined).
WORLDS = list(itertools.product([False, True], [None, "j_7"], [False, True]))


class Worker(WorkerFsmMixin):
    def __init__(
        self,
        state: str = "idle",
        drain_requested: bool = False,
        current_job_id: str | None = None,
        worker_id: str = "w_1",
        quarantined: bool = False,
    ) -> None:
        self.worker_id = worker_id
        self.state = state
        self.drain_requested = drain_requested
        self.current_job_id = current_job_id
        self.quarantined = quarantined

    def facts(self) -> tuple[str, bool, str | None, bool]:
        return (self.state, self.drain_requested, self.current_job_id, self.quarantined)


def contract(
    state: str, event: str, drain: bool, job: str | None, quarantined: bool = False
) -> tuple[str, bool, bool] | None:
    """The contract's prose, written independently of the table: (new state, drain flag,
    quarantine flag) or None when the event is illegal."""
    if event == "quarantine":
        return None if quarantined else (state, drain, True)
    if event == "unquarantine":
        return (state, drain, False) if quarantined else None
    if event == "assign" and quarantined:
        return None  # no job is ever dispatched to a quarantined worker
    moved = _contract_before_quarantine(state, event, drain, job)
    return None if moved is None else (*moved, quarantined)


def _contract_before_quarantine(
    state: str, event: str, drain: bool, job: str | None
) -> tuple[str, bool] | None:
    if event == "register":
        return ("draining" if drain else "busy" if job else "idle", drain)
    if event == "assign":
        return ("busy", drain) if state == "idle" else None
    if event == "release":
        return {"busy": ("idle", drain), "draining": ("draining", drain)}.get(state)
    if event == "drain":
        return (state if state in ("connecting", "offline") else "draining", True)
    if event == "resume":
        if state in ("idle", "busy"):
            return None
        if state == "draining":
            return ("busy" if job else "idle", False)
        return (state, False)
    if event == "lose":
        return None if state == "offline" else ("offline", drain)
    raise AssertionError(f"the contract has no worker event {event}")


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _row_applies(row: dict[str, Any], worker: Worker) -> bool:
    return all(getattr(worker, name)() for name in _names(row.get("conditions"))) and not any(
        getattr(worker, name)() for name in _names(row.get("unless"))
    )


ROW_SOURCES = [
    pytest.param(index, source, id=f"{row['trigger']}:{source}->{row['dest']}#{index}")
    for index, row in enumerate(WORKER_TRANSITIONS)
    for source in _names(row["source"])
]
ALLOWED = {
    (source, row["trigger"]) for row in WORKER_TRANSITIONS for source in _names(row["source"])
}
ILLEGAL = sorted(set(itertools.product(STATES, EVENTS)) - ALLOWED)


@pytest.mark.parametrize(("index", "source"), ROW_SOURCES)
def test_each_row_moves_to_its_destination_whenever_its_guards_pass(
    index: int, source: str
) -> None:
    row = WORKER_TRANSITIONS[index]
    fired = 0
    for drain, job, quarantined in WORLDS:
        worker = Worker(source, drain, job, quarantined=quarantined)
        if not _row_applies(row, worker):
            continue
        assert WORKER_LIFECYCLE.can_fire(worker, row["trigger"])
        assert WORKER_LIFECYCLE.fire(worker, row["trigger"]) == row["dest"]
        assert worker.state == row["dest"]
        assert worker.current_job_id == job, "the FSM never touches current_job_id"
        fired += 1
    assert fired, "a row whose guards can never pass is dead"


@pytest.mark.parametrize(("state", "event"), ILLEGAL)
def test_every_event_outside_the_table_is_illegal(state: str, event: str) -> None:
    for drain, job, quarantined in WORLDS:
        worker = Worker(state, drain, job, worker_id="w_42", quarantined=quarantined)
        assert not WORKER_LIFECYCLE.can_fire(worker, event)
        with pytest.raises(IllegalTransition) as caught:
            WORKER_LIFECYCLE.fire(worker, event)
        error = caught.value
        assert (error.entity, error.entity_id, error.state, error.event) == (
            "worker",
            "w_42",
            state,
            event,
        )
        assert str(error) == f"worker w_42 is {state}; cannot {event} it"
        assert worker.facts() == (state, drain, job, quarantined), "a refused event changes nothing"


@pytest.mark.parametrize(("state", "event"), sorted(ALLOWED))
def test_at_most_one_row_applies_so_row_order_does_not_matter(state: str, event: str) -> None:
    for drain, job, quarantined in WORLDS:
        worker = Worker(state, drain, job, quarantined=quarantined)
        rows = [
            row
            for row in WORKER_TRANSITIONS
            if row["trigger"] == event
            and state in _names(row["source"])
            and _row_applies(row, worker)
        ]
        assert len(rows) <= 1, rows


@pytest.mark.parametrize(("state", "event"), list(itertools.product(STATES, EVENTS)))
def test_the_table_does_what_the_contract_says(state: str, event: str) -> None:
    for drain, job, quarantined in WORLDS:
        worker = Worker(state, drain, job, quarantined=quarantined)
        expected = contract(state, event, drain, job, quarantined)
        if expected is None:
            with pytest.raises(IllegalTransition):
                WORKER_LIFECYCLE.fire(worker, event)
            assert worker.facts() == (state, drain, job, quarantined)
        else:
            assert WORKER_LIFECYCLE.fire(worker, event) == expected[0]
            assert (worker.state, worker.drain_requested, worker.quarantined) == expected
            assert worker.current_job_id == job


def test_every_guard_and_effect_the_table_names_is_on_the_mixin() -> None:
    for row in WORKER_TRANSITIONS:
        for key in ("conditions", "unless", "before", "after"):
            for name in _names(row.get(key)):
                assert callable(getattr(WorkerFsmMixin, name, None)), (key, name)


def test_drain_sticks_across_a_disconnect_until_resumed() -> None:
    worker = Worker("busy", current_job_id="j_1")
    assert WORKER_LIFECYCLE.fire(worker, "drain") == "draining"
    assert WORKER_LIFECYCLE.fire(worker, "lose") == "offline"
    worker.current_job_id = None  # the actor requeues the lost job
    assert WORKER_LIFECYCLE.fire(worker, "register") == "draining"
    assert WORKER_LIFECYCLE.fire(worker, "resume") == "idle"
    assert worker.drain_requested is False
    assert WORKER_LIFECYCLE.fire(worker, "register") == "idle"


def test_a_drain_requested_while_offline_applies_on_reconnect() -> None:
    worker = Worker("offline")
    assert WORKER_LIFECYCLE.fire(worker, "drain") == "offline"
    assert worker.drain_requested
    assert WORKER_LIFECYCLE.fire(worker, "register") == "draining"


def test_register_resumes_the_job_a_worker_reports() -> None:
    worker = Worker("offline", current_job_id="j_3")
    assert WORKER_LIFECYCLE.fire(worker, "register") == "busy"


def test_resume_from_idle_is_refused_with_a_clear_message() -> None:
    with pytest.raises(IllegalTransition, match=r"^worker w_1 is idle; cannot resume it$"):
        WORKER_LIFECYCLE.fire(Worker("idle"), "resume")


def test_events_from_lists_what_the_table_allows() -> None:
    flag = {"quarantine", "unquarantine"}
    assert WORKER_LIFECYCLE.events_from("offline") == {"register", "drain", "resume"} | flag
    assert WORKER_LIFECYCLE.events_from("idle") == {"register", "assign", "drain", "lose"} | flag
    for state in STATES:
        assert WORKER_LIFECYCLE.events_from(state) == {e for s, e in ALLOWED if s == state}


class WorkerLifecycle(RuleBasedStateMachine):
    """One worker driven the way its actor drives it, with random (also illegal) events."""

    @initialize(state=st.sampled_from(["connecting", "offline"]))
    def create(self, state: str) -> None:
        self.worker = Worker(state)
        self.drain_expected = False
        self.quarantine_expected = False

    def _fire(self, event: str) -> None:
        before = self.worker.facts()
        expected = contract(*before[:1], event, *before[1:])
        assert WORKER_LIFECYCLE.can_fire(self.worker, event) == (expected is not None)
        if expected is None:
            with pytest.raises(IllegalTransition):
                WORKER_LIFECYCLE.fire(self.worker, event)
            assert self.worker.facts() == before
            return
        assert WORKER_LIFECYCLE.fire(self.worker, event) == expected[0]
        assert (self.worker.state, self.worker.drain_requested, self.worker.quarantined) == (
            expected
        )

    @rule()
    def quarantine(self) -> None:
        self._fire("quarantine")
        self.quarantine_expected = True

    @rule()
    def unquarantine(self) -> None:
        self._fire("unquarantine")
        self.quarantine_expected = False

    @rule(job=st.sampled_from([None, "j_1"]))
    def register(self, job: str | None) -> None:
        if self.worker.state in ("connecting", "offline"):
            self.worker.current_job_id = job  # what the agent says it still runs
        self._fire("register")

    @rule()
    def assign(self) -> None:
        was_idle = self.worker.state == "idle" and not self.worker.quarantined
        self._fire("assign")
        if was_idle:
            self.worker.current_job_id = "j_2"

    @rule()
    def release(self) -> None:
        if self.worker.state in ("busy", "draining"):
            self.worker.current_job_id = None
        self._fire("release")

    @rule()
    def drain(self) -> None:
        self._fire("drain")
        self.drain_expected = True

    @rule()
    def resume(self) -> None:
        legal = self.worker.state not in ("idle", "busy")
        self._fire("resume")
        if legal:
            self.drain_expected = False

    @rule()
    def lose(self) -> None:
        was_online = self.worker.state != "offline"
        self._fire("lose")
        if was_online:
            self.worker.current_job_id = None  # the actor requeues the lost job

    @invariant()
    def drain_is_sticky(self) -> None:
        assert self.worker.drain_requested == self.drain_expected

    @invariant()
    def quarantine_is_sticky(self) -> None:
        assert self.worker.quarantined == self.quarantine_expected

    @invariant()
    def state_agrees_with_its_facts(self) -> None:
        state, drain, job, _ = self.worker.facts()
        assert state in STATES
        if state in ("idle", "busy"):
            assert not drain, "an idle or busy worker has no drain pending"
        if state == "draining":
            assert drain
        if state == "busy":
            assert job is not None
        if state in ("idle", "connecting", "offline"):
            assert job is None


TestWorkerLifecycle = WorkerLifecycle.TestCase
TestWorkerLifecycle.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
