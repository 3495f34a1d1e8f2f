"""Who this worker is, per the orchestrator: the administrator's name and worker_type,
which the registration answer carries (tunefleet's addition to the protocol).

The administrator's worker_type is the one in force: the orchestrator lists, keeps and
removes the worker by it, so an agent that ran otherwise (a "persistent" worker whose
agent exits after one job) would contradict what everyone else sees. The agent's own
--persistent / SIMPLETUNER_WORKER_PERSISTENT and --name only count when the
orchestrator says nothing (an older orchestrator, SimpleTuner's); where they disagree,
the agent says so in its log, and the orchestrator shows it on the worker.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunefleet.agent.client import Registration
from tunefleet.agent.settings import (
    DEFAULT_EPHEMERAL_RECONNECT_TIMEOUT_S,
    ENV_NAME,
    ENV_PERSISTENT,
    AgentSettings,
)


@dataclass(frozen=True, slots=True)
class Identity:
    persistent: bool
    notes: tuple[str, ...]  # what to tell the user, once each


def reconcile(settings: AgentSettings, registration: Registration) -> Identity:
    notes: list[str] = []
    persistent = settings.persistent
    if registration.worker_type is not None:  # one of WorkerType: the model read it
        persistent = registration.worker_type == "persistent"
        if persistent != settings.persistent:
            started = "persistent" if settings.persistent else "ephemeral"
            change = "stays online between jobs" if persistent else "exits after one job"
            notes.append(
                f"The administrator made this worker {registration.worker_type}, but the "
                f"agent was started {started} (--persistent / {ENV_PERSISTENT}); it follows "
                f"the worker type and {change}. Start it "
                f"{'with' if persistent else 'without'} --persistent to match."
            )
    if registration.name and registration.name != settings.name:
        notes.append(
            f"The orchestrator knows this worker as {registration.name!r}; the agent's name "
            f"{settings.name!r} (--name / {ENV_NAME}, default the host name) is shown beside "
            "it but not used."
        )
    return Identity(persistent, tuple(notes))


def reconnect_limit_s(settings: AgentSettings, persistent: bool) -> float | None:
    """--reconnect-timeout as given, or else the default of the worker type in force:
    an agent started ephemeral for a persistent worker waits for its orchestrator."""
    if not settings.reconnect_timeout_by_type:
        return settings.reconnect_timeout_s
    return None if persistent else DEFAULT_EPHEMERAL_RECONNECT_TIMEOUT_S
