"""The worker lifecycle: states, the transition table, and the guards/effects it names.

A drain is sticky: ``drain`` sets ``drain_requested`` from any state (even while the
worker is offline), a reconnecting worker comes back ``draining``, and only ``resume``
clears it. A quarantine is sticky the same way: ``quarantine`` sets ``quarantined`` from
any state, keeping the state (the worker keeps its current job and its stream), and
only ``unquarantine`` clears it; ``assign`` refuses a quarantined worker, so no job is
ever dispatched to one. The FSM never touches ``current_job_id``: the owning actor sets it when it
assigns a job and clears it when the job is released.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal, TypeAlias

from tunefleet.fsm.lifecycle import Lifecycle


class WorkerState(StrEnum):
    CONNECTING = "connecting"  # known (created by an admin) but never connected yet
    IDLE = "idle"
    BUSY = "busy"
    DRAINING = "draining"  # takes no new job; the running one may finish
    OFFLINE = "offline"  # heartbeat timeout or disconnect


# The states as a type, for wire schemas (see JobStateName). A test holds it to WorkerState.
WorkerStateName: TypeAlias = Literal["connecting", "idle", "busy", "draining", "offline"]

_EVERY_STATE = ("connecting", "offline", "idle", "busy", "draining")

WORKER_TRANSITIONS: tuple[dict[str, Any], ...] = (
    # A (re)registration lands where the worker's own facts say: a sticky drain first,
    # then the job it is resuming, else ready for work. Exactly one row applies.
    {
        "trigger": "register",
        "source": _EVERY_STATE,
        "dest": "draining",
        "conditions": "is_drain_requested",
    },
    {
        "trigger": "register",
        "source": _EVERY_STATE,
        "dest": "busy",
        "conditions": "has_job",
        "unless": "is_drain_requested",
    },
    {
        "trigger": "register",
        "source": _EVERY_STATE,
        "dest": "idle",
        "unless": ["is_drain_requested", "has_job"],
    },
    # Only the scheduler assigns; the actor records current_job_id right after. Never to
    # a quarantined worker.
    {"trigger": "assign", "source": "idle", "dest": "busy", "unless": "is_quarantined"},
    # The job ended; a draining worker stays draining (an ephemeral one then leaves).
    {"trigger": "release", "source": "busy", "dest": "idle"},
    {"trigger": "release", "source": "draining", "dest": "draining"},
    # No new jobs; a running one finishes. Not connected: remember it for the next register.
    {
        "trigger": "drain",
        "source": ["idle", "busy", "draining"],
        "dest": "draining",
        "before": "request_drain",
    },
    {"trigger": "drain", "source": "connecting", "dest": "connecting", "before": "request_drain"},
    {"trigger": "drain", "source": "offline", "dest": "offline", "before": "request_drain"},
    # An admin undoes a drain. From idle or busy there is no drain to undo: illegal.
    {
        "trigger": "resume",
        "source": "draining",
        "dest": "busy",
        "conditions": "has_job",
        "before": "clear_drain",
    },
    {
        "trigger": "resume",
        "source": "draining",
        "dest": "idle",
        "unless": "has_job",
        "before": "clear_drain",
    },
    {"trigger": "resume", "source": "connecting", "dest": "connecting", "before": "clear_drain"},
    {"trigger": "resume", "source": "offline", "dest": "offline", "before": "clear_drain"},
    # A bad machine (automatically: actors/quarantine_policy.py; or by an admin) takes no
    # new job; its current one finishes and it stays connected. Once only.
    *(
        {
            "trigger": "quarantine",
            "source": state,
            "dest": state,
            "unless": "is_quarantined",
            "before": "set_quarantine",
        }
        for state in _EVERY_STATE
    ),
    # An admin releases it: it takes jobs again (a draining one stays draining).
    *(
        {
            "trigger": "unquarantine",
            "source": state,
            "dest": state,
            "conditions": "is_quarantined",
            "before": "clear_quarantine",
        }
        for state in _EVERY_STATE
    ),
    # Heartbeat timeout, disconnect, or never connected in time.
    {"trigger": "lose", "source": ["connecting", "idle", "busy", "draining"], "dest": "offline"},
)

WORKER_LIFECYCLE = Lifecycle("worker", WorkerState, WORKER_TRANSITIONS, id_attr="worker_id")


class WorkerFsmMixin:
    """What the worker table needs from its model: the attributes it reads and the guard and
    effect methods it names. Actors and tests inherit it and set the attributes themselves."""

    worker_id: str
    state: str
    drain_requested: bool
    current_job_id: str | None
    quarantined: bool = False

    # --- guards -----------------------------------------------------------------------

    def is_drain_requested(self) -> bool:
        return self.drain_requested

    def has_job(self) -> bool:
        return self.current_job_id is not None

    def is_quarantined(self) -> bool:
        return self.quarantined

    # --- effects: only the model's own drain flag, no I/O --------------------------------

    def request_drain(self) -> None:
        self.drain_requested = True

    def clear_drain(self) -> None:
        self.drain_requested = False

    def set_quarantine(self) -> None:
        self.quarantined = True

    def clear_quarantine(self) -> None:
        self.quarantined = False
