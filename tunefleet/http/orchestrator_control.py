"""Who already controls the orchestrator: the one answer every policy that depends on it
asks (today the local runner's isolation, docs/operations.md "Who can run what", and
which jobs a principal sees, http/job_access.py).

The answer is the principal's role: a user whose role is admin runs the fleet, whatever
one of their tokens was narrowed to (its permissions still bound what that token may
ask). It is kept beside the principal, as ``auth.controls_orchestrator``; this module
names it for the policies, so that there is one implementation.
"""

from __future__ import annotations

from tunefleet.http.auth import controls_orchestrator

__all__ = ["controls_orchestrator"]
