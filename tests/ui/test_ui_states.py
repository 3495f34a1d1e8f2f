"""The web UI's state lists are the lifecycles' states: js/states.js spells them once, in
the enums' order, and no other module writes a list of states of its own."""

import re
from pathlib import Path

from tunefleet.fsm import TERMINAL_JOB_STATES, JobState, WorkerState
from tunefleet.http import ui

JS = Path(ui.INDEX_FILE).parent / "js"
STATES_JS = JS / "states.js"
WORDS = frozenset(str(state) for enum in (JobState, WorkerState) for state in enum)
EXPORTED_LIST = re.compile(r"export const (\w+) = (?:new Set\()?\[([^\[\]]*)\]")
QUOTED = re.compile(r"'([^']*)'")
# An array literal of strings only: ['a', 'b'].
STRING_LIST = re.compile(r"\[((?:\s*'[^'\n]*'\s*,)*\s*'[^'\n]*'\s*,?\s*)\]")


def _exported_lists(text: str) -> dict[str, list[str]]:
    return {name: QUOTED.findall(body) for name, body in EXPORTED_LIST.findall(text)}


def test_states_js_spells_the_enums_in_order() -> None:
    lists = _exported_lists(STATES_JS.read_text())
    assert lists["JOB_STATES"] == [state.value for state in JobState]
    assert lists["WORKER_STATES"] == [state.value for state in WorkerState]
    assert sorted(lists["TERMINAL_JOB_STATES"]) == sorted(TERMINAL_JOB_STATES)


def _lists_of_states(text: str) -> list[str]:
    """Array literals naming two or more different states."""
    return [
        body for body in STRING_LIST.findall(text) if len(set(QUOTED.findall(body)) & WORDS) >= 2
    ]


def test_no_other_module_lists_states_of_its_own() -> None:
    found = {
        module.relative_to(JS).as_posix(): lists
        for module in sorted(JS.rglob("*.js"))
        if module != STATES_JS and (lists := _lists_of_states(module.read_text()))
    }
    assert found == {}, "import the lists from js/states.js instead"


def test_the_list_scan_sees_a_list() -> None:
    assert _lists_of_states("const S = new Set(['completed', 'failed']);") == [
        "'completed', 'failed'"
    ]
    assert _lists_of_states("[['running', 'Running'], ['queue_depth', 'Queued']]") == []
