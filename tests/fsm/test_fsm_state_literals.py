"""No state or status word is spelled as a string outside fsm/ and protocol/.

Everything else compares with the enums (JobState, WorkerState, ReportedStatus) or the
terminal sets, so a renamed or added state cannot leave a stale copy behind. The scan reads
each module's syntax tree: only a string that is exactly a state word counts (a sentence
that mentions "pending" does not).
"""

import ast
from pathlib import Path

import tunefleet
from tunefleet.fsm import JobState, WorkerState
from tunefleet.protocol.status import ReportedStatus

PACKAGE = Path(tunefleet.__file__).parent
OWNERS = ("fsm", "protocol")  # where the words are defined
WORDS = frozenset(str(word) for enum in (JobState, WorkerState, ReportedStatus) for word in enum)

# The same word with another meaning; each entry says which. (module, word) pairs.
ALLOWED: dict[tuple[str, str], str] = {
    ("actors/clock.py", "cancelled"): "a timer's attribute and its repr, not a job",
    ("actors/clock.py", "pending"): "a timer's repr: not fired yet",
    ("actors/runtime.py", "running"): "an actor task's own state in its repr",
    ("http/routes_ops.py", "starting"): "the server's readiness answer while it loads",
    ("storage/schema_v1.py", "pending"): "migration 1's frozen schema never follows the enums",
    ("storage/migration_steps.py", "pending"): "migration 16's frozen webhook delivery default",
    ("webhooks/policy.py", "pending"): "a webhook delivery's own state (DeliveryState)",
    ("webhooks/policy.py", "failed"): "a webhook delivery's own state (DeliveryState)",
    ("webhooks/chat.py", "completed"): "the verb of a chat sentence ('j_12 ... completed')",
    ("webhooks/chat.py", "failed"): "the verb of a chat sentence ('j_12 ... failed')",
}


def _state_words(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in WORDS
    }


def _found() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module.split("/")[0] in OWNERS:
            continue
        found |= {(module, word) for word in _state_words(path)}
    return found


def test_no_state_word_is_spelled_outside_fsm_and_protocol() -> None:
    stray = sorted(_found() - set(ALLOWED))
    assert not stray, f"use the enums or terminal sets of fsm/ or protocol/ instead: {stray}"


def test_every_allowed_spelling_is_still_there() -> None:
    assert not set(ALLOWED) - _found(), "remove allowlist entries that no longer match"


def test_the_scan_sees_a_spelled_state(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""A job is pending."""\nDONE = {"completed"}\nx = f"{y == \'idle\'}"\n')
    assert _state_words(module) == {"completed", "idle"}


def test_the_wires_status_words_are_the_lifecycles_states() -> None:
    """tunefleet.client spells them from protocol/states.py (it must not import fsm/)."""
    from typing import get_args

    from tunefleet.fsm import TERMINAL_JOB_STATES
    from tunefleet.protocol import states

    assert set(get_args(states.JobStatusName)) == {str(s) for s in JobState}
    assert set(get_args(states.WorkerStatusName)) == {str(s) for s in WorkerState}
    assert {str(s) for s in TERMINAL_JOB_STATES} == states.TERMINAL_JOB_STATUSES
    assert states.JOB_COMPLETED == JobState.COMPLETED
