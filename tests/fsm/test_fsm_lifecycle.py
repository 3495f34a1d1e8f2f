"""Lifecycle itself: one shared machine built from the table, errors translated, tables
validated when they are declared."""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Any

import pytest

from tunefleet.errors import TunefleetError
from tunefleet.fsm import (
    JOB_LIFECYCLE,
    JOB_TRANSITIONS,
    WORKER_LIFECYCLE,
    WORKER_TRANSITIONS,
    IllegalTransition,
    JobState,
    Lifecycle,
    WorkerState,
)


class DoorState(StrEnum):
    OPEN = "open"
    SHUT = "shut"


DOOR_TRANSITIONS: tuple[dict[str, Any], ...] = (
    {"trigger": "close", "source": "open", "dest": "shut"},
    {"trigger": "open", "source": "shut", "dest": "open", "unless": "is_locked"},
)


class Door:
    def __init__(self, state: str = "shut", locked: bool = False) -> None:
        self.door_id = "d_1"
        self.state = state
        self.locked = locked

    def is_locked(self) -> bool:
        return self.locked


def door_lifecycle() -> Lifecycle:
    return Lifecycle("door", DoorState, DOOR_TRANSITIONS, id_attr="door_id")


@pytest.mark.parametrize(
    ("lifecycle", "table", "states"),
    [
        (WORKER_LIFECYCLE, WORKER_TRANSITIONS, WorkerState),
        (JOB_LIFECYCLE, JOB_TRANSITIONS, JobState),
    ],
    ids=["worker", "job"],
)
def test_one_shared_machine_built_from_the_very_table(
    lifecycle: Lifecycle, table: tuple[dict[str, Any], ...], states: type[StrEnum]
) -> None:
    machine = lifecycle.machine
    assert lifecycle.transitions is table
    assert machine.models == [], "models are never added: they keep their own state"
    assert machine.initial is None
    assert list(machine.states) == [state.value for state in states]
    assert set(machine.events) == {row["trigger"] for row in table}, "no auto to_<state>"
    built = [
        (event, source, t.dest, [(c.func, c.target) for c in t.conditions], t.before, t.after)
        for event, trigger in machine.events.items()
        for source, candidates in trigger.transitions.items()
        for t in candidates
    ]
    declared = []
    for row in table:
        sources = [row["source"]] if isinstance(row["source"], str) else row["source"]
        for source in sources:
            guards = [(name, True) for name in _names(row.get("conditions"))]
            guards += [(name, False) for name in _names(row.get("unless"))]
            declared.append(
                (
                    row["trigger"],
                    source,
                    row["dest"],
                    guards,
                    _names(row.get("before")),
                    _names(row.get("after")),
                )
            )
    assert sorted(map(repr, built)) == sorted(map(repr, declared))


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def test_the_transitions_logger_is_quiet() -> None:
    assert logging.getLogger("transitions").level == logging.WARNING


def test_fire_returns_a_plain_string_state_even_from_a_strenum_model_state() -> None:
    door = Door(DoorState.SHUT)
    assert door_lifecycle().fire(door, "open") == "open"
    assert type(door.state) is str


def test_a_strenum_state_is_read_by_value_not_by_member_name() -> None:
    door = Door(DoorState.OPEN)
    lifecycle = door_lifecycle()
    assert lifecycle.can_fire(door, "close")
    assert lifecycle.fire(door, "close") == DoorState.SHUT


def test_a_failing_guard_is_an_illegal_transition_not_a_silent_false() -> None:
    door = Door("shut", locked=True)
    lifecycle = door_lifecycle()
    assert not lifecycle.can_fire(door, "open")
    with pytest.raises(IllegalTransition, match=r"^door d_1 is shut; cannot open it$"):
        lifecycle.fire(door, "open")
    assert door.state == "shut"


def test_illegal_transition_is_a_one_line_tunefleet_conflict() -> None:
    error = IllegalTransition("job", "j_12", "completed", "cancel")
    assert isinstance(error, TunefleetError)
    assert error.status == 409
    assert str(error) == "job j_12 is completed; cannot cancel it"
    assert "\n" not in str(error)


def test_a_model_in_an_unknown_state_is_refused_by_name() -> None:
    door = Door("ajar")
    lifecycle = door_lifecycle()
    assert not lifecycle.can_fire(door, "close")
    with pytest.raises(IllegalTransition, match=r"^door d_1 is ajar; cannot close it$"):
        lifecycle.fire(door, "close")
    assert door.state == "ajar"


def test_an_unknown_event_is_a_bug_not_an_illegal_transition() -> None:
    lifecycle = door_lifecycle()
    with pytest.raises(ValueError, match="door lifecycle has no event 'slam'"):
        lifecycle.fire(Door(), "slam")
    with pytest.raises(ValueError, match="door lifecycle has no event 'slam'"):
        lifecycle.can_fire(Door(), "slam")


def test_events_from_an_unknown_state_is_a_bug() -> None:
    with pytest.raises(ValueError, match="door lifecycle has no state 'ajar'"):
        door_lifecycle().events_from("ajar")


def test_a_machine_error_is_translated_and_never_leaks(monkeypatch: pytest.MonkeyPatch) -> None:
    lifecycle = door_lifecycle()
    # Make the fast check wrong on purpose so transitions itself refuses the event.
    monkeypatch.setitem(lifecycle._events_by_state, "open", frozenset({"open", "close"}))
    with pytest.raises(IllegalTransition) as caught:
        lifecycle.fire(Door("open"), "open")
    assert type(caught.value.__cause__).__name__ == "MachineError"
    assert lifecycle.machine.events["open"].transitions.get("open") is None


def test_can_fire_does_not_grow_the_shared_machine() -> None:
    lifecycle = door_lifecycle()
    assert not lifecycle.can_fire(Door("open"), "open")
    assert "open" not in lifecycle.machine.events["open"].transitions
    with pytest.raises(IllegalTransition):
        lifecycle.fire(Door("open"), "open")


def test_edges_expand_every_source_in_table_order() -> None:
    assert door_lifecycle().edges() == (("close", "open", "shut"), ("open", "shut", "open"))
    assert len(JOB_LIFECYCLE.edges()) == 1 + 1 + 1 + 1 + 1 + 3 + 2 + 2 + 2 + 4


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"trigger": "close", "source": "open", "dest": "ajar"}, "goes to unknown state 'ajar'"),
        ({"trigger": "close", "source": "open", "dest": "="}, "goes to unknown state '='"),
        ({"trigger": "close", "source": "open", "dest": None}, "goes to unknown state None"),
        ({"trigger": "close", "source": ["open", "ajar"], "dest": "shut"}, r"\['ajar'\]"),
        ({"trigger": "close", "source": "*", "dest": "shut"}, r"unknown states \['\*'\]"),
        ({"trigger": "close", "dest": "shut"}, "needs a source state"),
        ({"source": "open", "dest": "shut"}, "needs a trigger name"),
        ({"trigger": "close", "source": "open", "dest": "shut", "prepare": "x"}, "'prepare'"),
    ],
)
def test_a_table_with_a_typo_is_refused_when_declared(row: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Lifecycle("door", DoorState, (DOOR_TRANSITIONS[0], row), id_attr="door_id")
