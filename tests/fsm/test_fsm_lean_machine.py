"""The lean transitions classes run a trigger exactly as transitions' own do."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from transitions import Machine, MachineError

from tunefleet.fsm.job import JOB_LIFECYCLE
from tunefleet.fsm.lean_machine import LeanMachine
from tunefleet.fsm.worker import WORKER_LIFECYCLE


class _Model:
    def __init__(self, state: str, flags: dict[str, bool]) -> None:
        self.state = state
        self.calls: list[str] = []
        self._flags = flags

    def __getattr__(self, name: str) -> Any:
        # Guards read the flags; any other callback records its call.
        flags = self.__dict__["_flags"]
        if name in flags:
            return lambda *a, **k: flags[name]
        return lambda *a, **k: self.calls.append(name)


def _guards(rows: tuple[Any, ...]) -> set[str]:
    names: set[str] = set()
    for row in rows:
        for key in ("conditions", "unless"):
            value = row.get(key, [])
            names.update([value] if isinstance(value, str) else value)
    return names


@pytest.mark.parametrize("lifecycle", [JOB_LIFECYCLE, WORKER_LIFECYCLE], ids=["job", "worker"])
def test_every_trigger_from_every_state_matches_transitions(lifecycle: Any) -> None:
    guards = sorted(_guards(lifecycle.transitions))
    kwargs: dict[str, Any] = {
        "model": None,
        "states": list(lifecycle.states),
        "initial": None,
        "auto_transitions": False,
        "transitions": lifecycle.transitions,
    }
    plain, lean = Machine(**kwargs), LeanMachine(**kwargs)
    for mask in range(2 ** len(guards)):
        flags = {name: bool(mask >> i & 1) for i, name in enumerate(guards)}
        for state in lifecycle.states:
            for event in plain.events:
                outcomes = []
                for machine in (plain, lean):
                    model = _Model(state, flags)
                    try:
                        moved: object = machine.events[event].trigger(model)
                    except MachineError:
                        moved = "refused"
                    outcomes.append((moved, model.state, model.calls))
                assert outcomes[0] == outcomes[1], (state, event, flags)


def test_state_and_machine_callbacks_still_run_in_order() -> None:
    def machine(cls: type[Machine]) -> Machine:
        return cls(
            model=None,
            states=[{"name": "a", "on_exit": "left_a"}, {"name": "b", "on_enter": "entered_b"}],
            initial=None,
            auto_transitions=False,
            transitions=[{"trigger": "go", "source": "a", "dest": "b", "after": "went"}],
            prepare_event="preparing",
            before_state_change="changing",
            after_state_change="changed",
            finalize_event="finalized",
        )

    plain, lean = _Model("a", {}), _Model("a", {})
    assert machine(Machine).events["go"].trigger(plain)
    assert machine(LeanMachine).events["go"].trigger(lean)
    assert lean.calls == plain.calls
    order = ["preparing", "changing", "left_a", "entered_b", "went", "changed", "finalized"]
    assert lean.calls == order


def test_an_ignored_invalid_trigger_still_warns(caplog: pytest.LogCaptureFixture) -> None:
    lean = LeanMachine(
        model=None,
        states=["a", "b"],
        initial=None,
        auto_transitions=False,
        transitions=[{"trigger": "go", "source": "a", "dest": "b"}],
        ignore_invalid_triggers=True,
    )
    model = _Model("b", {})
    with caplog.at_level(logging.WARNING, logger="transitions"):
        assert lean.events["go"].trigger(model) is False
    assert "Can't trigger event go from state b" in caplog.text
