"""quarantine_policy by example: what an agent's stop as it shuts down means for its
worker (nothing: an operator's SIGTERM or a spot reclaim is not a broken machine)."""

from __future__ import annotations

from tunefleet.actors.quarantine_policy import AttemptEnd, QuarantineRule, quarantine_reason
from tunefleet.fsm.failure_kinds import FailureKind

RULE = QuarantineRule(after=3, within_s=3600.0)
CUDA = FailureKind.INFRASTRUCTURE
SHUTDOWN = FailureKind.WORKER_SHUTDOWN


def _ends(*kinds: FailureKind | None) -> list[AttemptEnd]:
    return [
        AttemptEnd(at=60.0 * n, job_id=f"j_{n}", kind=kind, signature="CUDA error" * (kind == CUDA))
        for n, kind in enumerate(kinds, start=1)
    ]


def test_shutdowns_alone_never_quarantine() -> None:
    ends = _ends(SHUTDOWN, SHUTDOWN, SHUTDOWN, SHUTDOWN)
    assert quarantine_reason(ends, set(), now=300.0, rule=RULE) is None


def test_a_shutdown_neither_counts_nor_breaks_a_run_of_failures() -> None:
    """Two CUDA errors, the agent restarted by its operator, a third CUDA error: the
    machine is still the one failing jobs (a completed job would have ended the run)."""
    ends = _ends(CUDA, CUDA, SHUTDOWN, CUDA)
    assert quarantine_reason(ends, set(), now=300.0, rule=RULE) == (
        "3 infrastructure failures in 3 min (CUDA error)"
    )
    assert quarantine_reason(_ends(CUDA, CUDA, None, CUDA), set(), now=300.0, rule=RULE) is None
