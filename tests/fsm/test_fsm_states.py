"""The states and status words have one source each, and their typed spellings agree with it."""

from typing import get_args

from tunefleet.fsm import TERMINAL_JOB_STATES, JobState, JobStateName, WorkerState, WorkerStateName
from tunefleet.protocol.status import (
    RUNNING_STATUSES,
    TERMINAL_STATUSES,
    ReportedStatus,
    ReportedStatusName,
    lifecycle_word,
)


def test_the_schema_types_spell_the_enums_in_order() -> None:
    assert get_args(JobStateName) == tuple(state.value for state in JobState)
    assert get_args(WorkerStateName) == tuple(state.value for state in WorkerState)
    assert get_args(ReportedStatusName) == tuple(word.value for word in ReportedStatus)


def test_the_terminal_words_are_the_terminal_job_states() -> None:
    assert {str(word) for word in TERMINAL_STATUSES} == {str(s) for s in TERMINAL_JOB_STATES}


def test_training_is_running_and_every_other_word_is_kept() -> None:
    assert lifecycle_word("training") == JobState.RUNNING
    for word in set(ReportedStatus) - {ReportedStatus.TRAINING}:
        assert lifecycle_word(word) == word
    assert lifecycle_word("something new") == "something new"


def test_every_word_is_either_alive_or_final_once_read() -> None:
    read = {lifecycle_word(word) for word in ReportedStatus}
    assert read == RUNNING_STATUSES | TERMINAL_STATUSES
    assert not RUNNING_STATUSES & TERMINAL_STATUSES
