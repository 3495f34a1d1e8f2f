"""A lifecycle: one shared ``transitions.Machine`` per entity type, fired on models that
keep their own ``state`` attribute.

A machine per model costs about 35 KB; one machine with no added models costs the
model nothing but its ``state`` string. So the machine is built once, with
``model=None`` and ``initial=None``, models are never added, and events are fired with
``machine.events[event].trigger(model)``. transitions' own exceptions are translated
into :class:`IllegalTransition` here and never reach the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final

from transitions import MachineError
from transitions.core import EventData

from tunefleet.fsm.errors import IllegalTransition
from tunefleet.fsm.lean_machine import LeanMachine

# transitions logs every state entry at INFO: noise at a thousand triggers a second.
logging.getLogger("transitions").setLevel(logging.WARNING)

TransitionRow = Mapping[str, Any]
"""One row of a transition table, as ``transitions.Machine(transitions=...)`` takes it."""

_ROW_KEYS: Final = frozenset(
    {"trigger", "source", "dest", "conditions", "unless", "before", "after"}
)


class Lifecycle:
    """The states and transition table of one entity type, and the machine built from them.

    ``entity`` names the entity in error messages ("worker", "job"); ``id_attr`` is the
    model attribute holding its id. The table must name every state explicitly (no
    ``"*"``, ``"="`` or internal ``None`` destinations) so it reads as it runs.
    """

    def __init__(
        self,
        entity: str,
        states: Iterable[str],
        transitions: tuple[TransitionRow, ...],
        id_attr: str,
    ) -> None:
        # str() turns StrEnum members into plain strings: transitions names an Enum state
        # by its member name ("IDLE"), which is not what models and the wire carry.
        self.states: tuple[str, ...] = tuple(str(state) for state in states)
        self.entity = entity
        self.id_attr = id_attr
        self.transitions = transitions
        _check_table(entity, self.states, transitions)
        self.machine = LeanMachine(
            model=None,
            states=list(self.states),
            initial=None,
            auto_transitions=False,
            transitions=transitions,
        )
        self._canonical: dict[str, str] = {state: state for state in self.states}
        self._events_by_state: dict[str, frozenset[str]] = {
            state: frozenset(self.machine.get_triggers(state)) for state in self.states
        }

    def fire(self, model: Any, event: str) -> str:
        """Fire ``event`` on ``model`` and return its new state.

        Raises IllegalTransition when the event is not allowed from ``model.state`` or
        none of its guards pass (the model is then unchanged), ValueError for an event the
        table does not know (a bug, not a user's request).
        """
        self._check_event(event)
        state = self._canonical.get(model.state)
        if state is None or event not in self._events_by_state[state]:
            raise self._illegal(model, event)
        if model.state.__class__ is not str:
            model.state = state  # a StrEnum member would be looked up by its member name
        try:
            moved = self.machine.events[event].trigger(model)
        except MachineError as err:
            raise self._illegal(model, event) from err
        if not moved:
            raise self._illegal(model, event)
        new_state: str = model.state
        return new_state

    def can_fire(self, model: Any, event: str) -> bool:
        """Whether :meth:`fire` would succeed now; evaluates guards, runs no effects."""
        self._check_event(event)
        state = self._canonical.get(model.state)
        if state is None:
            return False
        trigger = self.machine.events[event]
        # .get, not []: the defaultdict would otherwise grow an empty, "valid" source.
        candidates = trigger.transitions.get(state)
        if not candidates:
            return False
        data = EventData(self.machine.get_state(state), trigger, self.machine, model, (), {})
        return any(
            all(condition.check(data) for condition in transition.conditions)
            for transition in candidates
        )

    def events_from(self, state: str) -> frozenset[str]:
        """The events the table allows from ``state`` (guards aside); empty for a terminal one."""
        try:
            return self._events_by_state[state]
        except KeyError:
            raise ValueError(f"{self.entity} lifecycle has no state {state!r}") from None

    def edges(self) -> tuple[tuple[str, str, str], ...]:
        """Every (trigger, source, destination) of the table, in table order."""
        return tuple(
            (row["trigger"], source, row["dest"])
            for row in self.transitions
            for source in _sources(row)
        )

    def _check_event(self, event: str) -> None:
        if event not in self.machine.events:
            raise ValueError(f"{self.entity} lifecycle has no event {event!r}")

    def _illegal(self, model: Any, event: str) -> IllegalTransition:
        entity_id = str(getattr(model, self.id_attr, "?"))
        return IllegalTransition(self.entity, entity_id, str(model.state), event)


def _sources(row: TransitionRow) -> tuple[str, ...]:
    source = row["source"]
    return (source,) if isinstance(source, str) else tuple(source)


def _check_table(entity: str, states: tuple[str, ...], table: tuple[TransitionRow, ...]) -> None:
    """Refuse a table that names an unknown state or key, so a typo fails at import."""
    known = frozenset(states)
    for number, row in enumerate(table):
        where = f"{entity} transition row {number} ({row.get('trigger')!r})"
        if extra := set(row) - _ROW_KEYS:
            raise ValueError(f"{where} has unknown keys {sorted(extra)}")
        if not isinstance(row.get("trigger"), str):
            raise ValueError(f"{where} needs a trigger name")
        if not isinstance(row.get("source"), str | list | tuple):
            raise ValueError(f"{where} needs a source state or a list of them")
        if row.get("dest") not in known:
            raise ValueError(f"{where} goes to unknown state {row.get('dest')!r}")
        if unknown := [source for source in _sources(row) if source not in known]:
            raise ValueError(f"{where} starts from unknown states {unknown}")
