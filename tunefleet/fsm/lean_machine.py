"""``transitions`` classes that run a trigger as the library does, minus its per-step
log calls.

A trigger in ``transitions`` makes about a dozen DEBUG and INFO logger calls (entering
and leaving each state, each callback list, each step of the transition). Its logger
is kept at WARNING, so none of them prints, yet each still costs a call and its
arguments: about half of a trigger's time at a thousand job cycles a second. These
subclasses, plugged in through the Machine's documented ``state_cls``,
``transition_cls`` and ``event_cls`` hooks, skip those calls and the empty callback
lists; conditions, ``unless``, ``before``/``after``, ``on_enter``/``on_exit`` and the
machine-wide callbacks still run in the same order, and warnings and errors (invalid
triggers when ignored, a failing finalize callback) are still logged.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, cast

from transitions import Event, Machine, State, Transition
from transitions.core import EventData

_LOGGER = logging.getLogger("transitions.core")


class LeanState(State):
    def enter(self, event_data: EventData) -> None:
        if self.on_enter:
            event_data.machine.callbacks(self.on_enter, event_data)

    def exit(self, event_data: EventData) -> None:
        if self.on_exit:
            event_data.machine.callbacks(self.on_exit, event_data)


class LeanTransition(Transition):
    def execute(self, event_data: EventData) -> bool:
        machine = event_data.machine
        if self.prepare:
            machine.callbacks(self.prepare, event_data)
        if self.conditions and not self._eval_conditions(event_data):
            return False
        if machine.before_state_change or self.before:
            machine.callbacks(itertools.chain(machine.before_state_change, self.before), event_data)
        if self.dest:  # None: an internal transition, no state change
            self._change_state(event_data)
        if self.after or machine.after_state_change:
            machine.callbacks(itertools.chain(self.after, machine.after_state_change), event_data)
        return True

    def _change_state(self, event_data: EventData) -> None:
        machine = event_data.machine
        machine.get_state(self.source).exit(event_data)
        dest = machine.get_state(cast(str, self.dest))  # execute() calls this only with one
        setattr(event_data.model, machine.model_attribute, dest.value)
        event_data.state = dest
        dest.enter(event_data)
        if dest.final:
            machine.callbacks(machine.on_final, event_data)


class LeanEvent(Event):
    def _trigger(self, event_data: EventData) -> bool:
        machine = self.machine
        event_data.state = machine.get_model_state(event_data.model)
        try:
            if self._is_valid_source(event_data.state):
                self._process(event_data)
        except BaseException as err:
            event_data.error = err  # type: ignore[assignment]  # as transitions does
            if machine.on_exception:
                machine.callbacks(machine.on_exception, event_data)
            else:
                raise
        finally:
            if machine.finalize_event:
                try:
                    machine.callbacks(machine.finalize_event, event_data)
                except BaseException as err:
                    _LOGGER.error(
                        "%sWhile executing finalize callbacks a %s occurred: %s.",
                        machine.name,
                        type(err).__name__,
                        str(err),
                    )
        return bool(event_data.result)

    def _process(self, event_data: EventData) -> bool:
        machine = self.machine
        if machine.prepare_event:
            machine.callbacks(machine.prepare_event, event_data)
        for trans in self.transitions[event_data.state.name]:
            event_data.transition = trans
            if trans.execute(event_data):
                event_data.result = True
                break
        return bool(event_data.result)


class LeanMachine(Machine):
    state_cls = LeanState
    transition_cls = LeanTransition
    event_cls = LeanEvent

    def callbacks(self, funcs: Any, event_data: EventData) -> None:
        for func in funcs:
            self.callback(func, event_data)
